"""Connections the server closed while they sat idle in a pool (``CLIENT KILL``, a
restart) are replaced before a lock command is sent on them: with Redis up, no lock
call fails with ``LockBackendUnavailable`` (issue 31, defect 3).

redis-py 8.1's asyncio pool skips its own check when maintenance notifications are
"auto"; ``.ci/run`` runs this module under that redis-py too, and under the oldest
we support (5.0).
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from django_redislock import Lock, Redlock
from django_redislock import lock as lock_module
from tests.support.polling import wait_until

FAULTS = ["client-kill", "restart"]
KINDS = ["lock", "redlock"]
ROUNDS = 5


@pytest.fixture
def nodes(make_server, settings):
    """``nodes(n)``: n private servers (AOF, so a restart keeps held keys) as aliases."""

    def start(n: int) -> tuple[list, list[str]]:
        servers = [make_server(appendonly=True, appendfsync="always") for _ in range(n)]
        aliases = [f"idle{i}" for i in range(n)]
        caches = dict(settings.CACHES)
        for alias, server in zip(aliases, servers, strict=True):
            caches[alias] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url}
        settings.CACHES = caches
        return servers, aliases

    return start


def close_idle_connections(servers: list, fault: str) -> None:
    for server in servers:
        if fault == "restart":
            server.restart()
        else:
            with server.client() as client:
                client.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")


def lock_factory(kind: str, aliases: list[str], **kwargs):  # type: ignore[no-untyped-def]
    if kind == "lock":
        return lambda: Lock("idle", connection=aliases[0], **kwargs)
    return lambda: Redlock("idle", connections=aliases, node_timeout=1.0, **kwargs)


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", KINDS)
def test_sync_calls_after_the_server_closed_idle_connections(nodes, kind, fault):
    servers, aliases = nodes(1 if kind == "lock" else 3)
    new = lock_factory(kind, aliases, ttl=5)
    for _ in range(ROUNDS):
        lock = new()
        assert lock.acquire(timeout=0)  # the pool now holds idle connections
        lock.release()
        close_idle_connections(servers, fault)
        lock = new()
        assert lock.acquire(timeout=0)
        assert lock.owned() and lock.locked()
        lock.extend()
        lock.release()


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", KINDS)
def test_async_calls_after_the_server_closed_idle_connections(nodes, kind, fault):
    servers, aliases = nodes(1 if kind == "lock" else 3)
    new = lock_factory(kind, aliases, ttl=5)

    async def run() -> None:
        for _ in range(ROUNDS):
            lock = new()
            assert await lock.aacquire(timeout=0)  # idle connections in this loop's pool
            await lock.arelease()
            close_idle_connections(servers, fault)
            lock = new()
            assert await lock.aacquire(timeout=0)
            assert await lock.aowned() and await lock.alocked()
            await lock.aextend()
            await lock.arelease()

    asyncio.run(run())


def renewal_failures(caplog: pytest.LogCaptureFixture, fault: str) -> list[str]:
    """Renewals that failed and were retried. None expected after a CLIENT KILL; a
    restart may overlap a renewal (connection refused while the server is down)."""
    if fault == "restart":
        return []
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Renewing")]


def renewed_since(lock, mark: float) -> bool:  # type: ignore[no-untyped-def]
    """A renewal sent after ``mark`` succeeded (it moved ``valid_until`` past it + ttl)."""
    valid_until = lock.valid_until
    return valid_until is not None and valid_until >= mark + lock.ttl


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_watchdog_renews_after_the_server_closed_idle_connections(nodes, kind, fault, caplog):
    caplog.set_level(logging.INFO, logger="django_redislock.watchdog")
    servers, aliases = nodes(1 if kind == "lock" else 3)
    lock = lock_factory(kind, aliases, ttl=2, watchdog=True)()
    assert lock.acquire(timeout=0)
    assert wait_until(lambda: renewed_since(lock, lock.acquired_monotonic), timeout=10)
    for _ in range(2):
        close_idle_connections(servers, fault)
        mark = lock_module.clock()
        assert wait_until(lambda m=mark: renewed_since(lock, m) or lock.lost, timeout=10)
        assert not lock.lost
    assert lock.owned()
    lock.release()
    assert renewal_failures(caplog, fault) == []


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_async_watchdog_renews_after_the_server_closed_idle_connections(
    nodes, kind, fault, caplog
):
    caplog.set_level(logging.INFO, logger="django_redislock.watchdog")
    servers, aliases = nodes(1 if kind == "lock" else 3)
    lock = lock_factory(kind, aliases, ttl=2, watchdog=True)()

    async def until(predicate) -> bool:  # type: ignore[no-untyped-def]
        # The renewals run in this loop: poll without blocking it.
        for _ in range(1000):
            if predicate():
                return True
            await asyncio.sleep(0.01)
        return bool(predicate())

    async def run() -> None:
        assert await lock.aacquire(timeout=0)
        assert await until(lambda: renewed_since(lock, lock.acquired_monotonic))
        for _ in range(2):
            close_idle_connections(servers, fault)
            mark = lock_module.clock()
            assert await until(lambda m=mark: renewed_since(lock, m) or lock.lost)
            assert not lock.lost
        assert await lock.aowned()
        await lock.arelease()

    asyncio.run(run())
    assert renewal_failures(caplog, fault) == []
