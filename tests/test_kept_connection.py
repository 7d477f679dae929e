"""The connection a lock call keeps for the next one (async: ``leases._keep``; sync:
``leases.keep_or_release``).

Checking a connection out of redis-py's blocking pool and back costs more than the rest
of an uncontended lock call, so a finished call keeps its connection for the next call
(async: of the same loop). These tests hold the promises that come with it: the pool is not
used while the kept one serves, nobody waits on the pool for it, and closing the client
(loop shutdown, settings change) closes it too.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

import redis
import redis.asyncio

from django_redislock import Lock, leases
from django_redislock.connection import _async_clients, lock_client, reset_clients
from django_redislock.transports import wire
from tests.support.held import token_at


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
        assert token_at(real_backend.client(), "redislock:{kept}") == lock.token
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


def test_consecutive_sync_calls_reuse_one_connection_without_the_pool(
    real_backend: Any, monkeypatch: Any
) -> None:
    lock = Lock("kept-sync", ttl=5)
    with lock:
        pass
    pool = lock_client("default").connection_pool
    kept = leases._kept[pool]
    checkouts = []
    own = redis.BlockingConnectionPool.get_connection

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        checkouts.append(self)
        return own(self, *args, **kwargs)

    monkeypatch.setattr(redis.BlockingConnectionPool, "get_connection", counted)
    for _ in range(3):
        with lock:
            assert token_at(real_backend.client(), "redislock:{kept-sync}") == lock.token
    assert checkouts == []
    assert leases._kept[pool] is kept


def test_a_sync_pool_with_no_other_connection_to_give_keeps_none(real_backend: Any) -> None:
    pool = redis.BlockingConnectionPool.from_url(real_backend.url, max_connections=1, timeout=0.5)
    try:
        assert wire._Direct(pool).send("PING") == b"PONG"
        assert pool not in leases._kept
        pool.release(pool.get_connection())  # at once: the one connection is back
    finally:
        pool.disconnect()


def test_a_settings_change_closes_the_kept_sync_connection(real_backend: Any) -> None:
    with Lock("kept-sync-reset", ttl=5):
        pass
    kept = leases._kept[lock_client("default").connection_pool]
    reset_clients()
    assert kept._sock is None


def _cycle_in_child(queue: Any) -> None:
    kept_from_parent = len(leases._kept)
    with Lock("kept-fork", ttl=5) as lock:
        queue.put((kept_from_parent, lock.fence))


def test_a_forked_child_does_not_use_the_parents_kept_connection(real_backend: Any) -> None:
    with Lock("kept-fork", ttl=5):
        pass
    pool = lock_client("default").connection_pool
    kept = leases._kept[pool]
    queue: Any = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_cycle_in_child, args=(queue,))
    child.start()
    assert queue.get(timeout=30) == (0, 2)
    child.join(30)
    with Lock("kept-fork", ttl=5) as lock:  # the parent's connection still answers
        assert lock.fence == 3
    assert leases._kept[pool] is kept


def test_the_idle_check_works_past_descriptor_1023() -> None:
    # A busy process (gunicorn with many clients) has sockets past 1023, which select()
    # refuses: the check would call every kept or pooled connection closed.
    import os
    import resource
    import socket

    import pytest

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip("the descriptor limit is below 2048")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    ours, theirs = socket.socketpair()
    high = socket.socket(fileno=os.dup2(ours.fileno(), 1500))
    try:
        assert high.fileno() == 1500
        assert leases.readable_now(high) is False
        theirs.sendall(b"x")
        assert leases.readable_now(high) is True
    finally:
        for sock in (high, ours, theirs):
            sock.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
