"""The connection an async lock call keeps for the next one (``leases._keep``).

Checking a connection out of redis-py's blocking pool and back costs more than the rest
of an uncontended async lock call, so a finished call keeps its connection for the next
call of the same loop. These tests hold the promises that come with it: the pool is not
used while the kept one serves, nobody waits on the pool for it, and closing the client
(loop shutdown, settings change) closes it too.
"""

from __future__ import annotations

import asyncio
from typing import Any

import redis.asyncio

from django_redislock import Lock, leases
from django_redislock.connection import _async_clients, reset_clients


def _pool() -> Any:
    return _async_clients[asyncio.get_running_loop()]["default"].connection_pool


async def test_consecutive_async_calls_reuse_one_connection_without_the_pool(
    real_backend: Any, monkeypatch: Any
) -> None:
    lock = Lock("kept", ttl=5)
    assert await lock.aacquire()
    await lock.arelease()
    pool = _pool()
    kept = leases._kept[pool]
    checkouts = []
    own = type(pool).get_connection

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        checkouts.append(self)
        return own(self, *args, **kwargs)

    monkeypatch.setattr(type(pool), "get_connection", counted)
    for _ in range(3):
        assert await lock.aacquire()
        assert real_backend.client().get("redislock:{kept}") == lock.token.encode()
        await lock.arelease()
    assert checkouts == []
    assert leases._kept[pool] is kept


async def test_a_pool_with_no_other_connection_to_give_keeps_none(real_backend: Any) -> None:
    # Kept while the pool is full, the connection would make the next user of the
    # pool wait for its timeout.
    pool = redis.asyncio.BlockingConnectionPool.from_url(
        real_backend.url, max_connections=1, timeout=0.5
    )
    client = redis.asyncio.Redis(connection_pool=pool)
    try:
        assert await leases.call(client, leases.CommandOp("PING")) == b"PONG"
        assert pool not in leases._kept
        conn = await pool.get_connection()  # at once: the one connection is back
        await pool.release(conn)
    finally:
        await pool.disconnect()


def test_loop_shutdown_closes_the_kept_connection(real_backend: Any) -> None:
    async def cycle() -> Any:
        lock = Lock("kept-shutdown", ttl=5)
        assert await lock.aacquire()
        await lock.arelease()
        return leases._kept[_pool()]

    kept = asyncio.run(cycle())
    assert not kept.is_connected


async def test_a_settings_change_closes_the_kept_connection(real_backend: Any) -> None:
    lock = Lock("kept-reset", ttl=5)
    assert await lock.aacquire()
    await lock.arelease()
    pool = _pool()
    kept = leases._kept[pool]
    reset_clients()  # what a changed CACHES or REDISLOCK does
    for _ in range(500):  # the close runs as a task of this loop
        if not kept.is_connected:
            break
        await asyncio.sleep(0.01)
    assert not kept.is_connected
    assert pool not in leases._kept
