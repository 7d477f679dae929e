"""Fixtures for running the suite against real servers and fakeredis.

How Django finds Redis: ``tests/support/plugin.py`` (loaded early with
``-p tests.support.plugin``) starts one default server before pytest-django imports
``tests.support.settings`` and exports its URL as ``REDISLOCK_TEST_REDIS_URL``, so
``settings.CACHES["default"]`` always points at a server this run started. Tests that do
not ask for a backend fixture use that server; it is flushed before every test
(:func:`_flush_default_server`).

Backend fixtures (function-scoped, parametrized; ids are the server names):

* ``lock_backend``: every real server found (``redis-6.2``, ``valkey-8.1``,
  ``redis-path-7.0``...) and ``fakeredis``;
* ``real_backend``: the same without ``fakeredis``.

Each points ``settings.CACHES["default"]`` (other aliases are kept) at its backend with
pytest-django's ``settings`` fixture; Django's ``setting_changed`` signal drops the cache
handlers, so ``django_redis.get_redis_connection("default")`` reaches the new server. The
backend starts empty (flushed; a fresh ``FakeServer`` for fakeredis) and yields a
:class:`Backend`. After the test a real server that the test paused, stopped or killed is
brought back (same port), so one test's faults do not leak into the next.

Factories for tests that need their own servers: ``make_server(name=None, **kwargs)`` and
``make_proxy(target)``; everything they made is closed after the test.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fakeredis
import pytest
import redis

from django_redislock.testing import FaultProxy, RedisServer, available_servers, cache_config
from tests.support import plugin

SERVERS_ENV = "REDISLOCK_TEST_SERVERS"


def _real_server_names() -> list[str]:
    """Every server found, or only the default one with ``REDISLOCK_TEST_SERVERS=default``
    (``make test-quick``), or the names listed there (comma-separated)."""
    found = [spec.name for spec in available_servers()]
    wanted = os.environ.get(SERVERS_ENV, "").strip()
    if not wanted:
        return found
    if wanted == "default":
        return [plugin.default_server.name] if plugin.default_server else found[:1]
    names = [name.strip() for name in wanted.split(",") if name.strip()]
    unknown = sorted(set(names) - set(found))
    if unknown:
        raise pytest.UsageError(f"{SERVERS_ENV}: no such server {unknown}; found: {found}")
    return names


REAL_SERVER_NAMES = _real_server_names()
FAKE = "fakeredis"


@dataclass
class Backend:
    """What ``lock_backend`` / ``real_backend`` yield."""

    name: str
    is_fake: bool
    url: str
    server: RedisServer | None = None
    fake_server: fakeredis.FakeServer | None = field(default=None, repr=False)

    def client(self, **kwargs: Any) -> redis.Redis:
        """A raw client for assertions (bytes replies unless ``decode_responses=True``)."""
        if self.fake_server is not None:
            return fakeredis.FakeRedis(server=self.fake_server, **kwargs)
        assert self.server is not None
        return self.server.client(**kwargs)

    def cache_config(self) -> dict[str, Any]:
        """A django-redis ``CACHES`` entry for this backend."""
        return cache_config(self.url, self.fake_server)


def _heal(server: RedisServer) -> None:
    """Undo a test's pause/stop/kill so the next test finds the server up."""
    if server.paused:
        server.resume()
    if not server.running:
        server.restart()


def _flushall(server: RedisServer) -> None:
    with server.client() as client:
        client.flushall()


def _use_backend(settings: Any, backend: Backend) -> None:
    caches = dict(settings.CACHES)
    caches["default"] = backend.cache_config()
    settings.CACHES = caches


def _real_backend(name: str) -> Backend:
    server = plugin.registry.get(name)
    _heal(server)
    _flushall(server)
    return Backend(name=name, is_fake=False, url=server.url, server=server)


@pytest.fixture(scope="session")
def django_db_modify_db_settings() -> None:
    """No per-worker suffix from pytest-django under xdist: each worker already has its own
    sqlite file (``tests/support/plugin.py``), and the child processes a test starts must
    find it under the name ``REDISLOCK_TEST_DB`` gives them."""


@pytest.fixture(autouse=True)
def _flush_default_server() -> Iterator[None]:
    server = plugin.default_server
    if server is not None:
        _heal(server)
        _flushall(server)
    yield
    if server is not None:
        _heal(server)


@pytest.fixture
def redis_servers() -> plugin.ServerRegistry:
    """The run's registry of lazily started servers: ``redis_servers.get("valkey-8.1")``."""
    return plugin.registry


def _backend_fixture(settings: Any, name: str) -> Iterator[Backend]:
    if name == FAKE:
        # A unique URL: django-redis caches pools per URL, and each test gets its own server.
        backend = Backend(
            name=FAKE,
            is_fake=True,
            url=f"redis://fakeredis-{uuid.uuid4().hex}/0",
            fake_server=fakeredis.FakeServer(),
        )
    else:
        backend = _real_backend(name)
    _use_backend(settings, backend)
    try:
        yield backend
    finally:
        if backend.server is not None:
            _heal(backend.server)
        else:
            from django_redis.pool import ConnectionFactory

            pool = ConnectionFactory._pools.pop(backend.url, None)
            if pool is not None:
                pool.disconnect()


@pytest.fixture(params=[*REAL_SERVER_NAMES, FAKE])
def lock_backend(request: pytest.FixtureRequest, settings: Any) -> Iterator[Backend]:
    """``CACHES["default"]`` on each real server and on fakeredis, one test per backend."""
    yield from _backend_fixture(settings, request.param)


@pytest.fixture(params=REAL_SERVER_NAMES)
def real_backend(request: pytest.FixtureRequest, settings: Any) -> Iterator[Backend]:
    """``CACHES["default"]`` on each real server (no fakeredis), one test per server."""
    yield from _backend_fixture(settings, request.param)


@pytest.fixture
def make_server() -> Iterator[Callable[..., RedisServer]]:
    """Start a private server: ``make_server("redis-6.2", appendonly=True)``.

    The name defaults to :func:`django_redislock.testing.default_server_spec`; keyword
    arguments go to :class:`RedisServer`. Every server made is closed (killed, directory
    removed) after the test.
    """
    made: list[RedisServer] = []

    def factory(name: str | None = None, **kwargs: Any) -> RedisServer:
        server = RedisServer(name, **kwargs)
        made.append(server)
        return server.start()

    yield factory
    for server in made:
        server.close()


@pytest.fixture
def make_proxy() -> Iterator[Callable[[RedisServer], FaultProxy]]:
    """Put a :class:`FaultProxy` in front of a server; closed after the test."""
    made: list[FaultProxy] = []

    def factory(target: RedisServer) -> FaultProxy:
        proxy = FaultProxy(target)
        made.append(proxy)
        return proxy

    yield factory
    for proxy in made:
        proxy.close()
