"""``MultiLock`` (DESIGN §9): every name or none, never a subset held while it waits,
``fences`` per name, ``lost`` if any part is lost; the whole ``Lock`` surface. Every server
found and fakeredis (``lock_backend``); processes: tests/test_multilock_processes.py;
Redis Cluster: tests/test_cluster.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from django_redislock import (
    Lock,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    MultiLock,
    force_release,
    held_locks,
    lock_info,
)
from tests.support.polling import wait_until

NAMES = ["account:2", "account:1"]


@pytest.mark.parametrize(
    ("names", "error"),
    [("account:1", "must be a list"), (["account:1"], "2 to 64 names, not 1"),
     ([f"n{i}" for i in range(65)], "not 65"), (["a", "b", "a"], r"given twice: \['a'\]"),
     (["a", "b{"], "must not contain"), (3, "must be a list")],
)  # fmt: skip
def test_bad_names_are_refused_before_any_network_call(names: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        MultiLock(names, connection="no-such-alias")
    with pytest.raises(ValueError, match="ttl must be > 0"):
        MultiLock(NAMES, ttl=0)


def test_every_name_or_none(lock_backend: Any) -> None:
    multi = MultiLock(NAMES, ttl=10, purpose="transfer 42")
    assert multi.acquire(blocking=False)
    assert multi.fences == {"account:1": 1, "account:2": 1}
    assert multi.owned() and multi.locked() and 9 < multi.remaining() <= 10
    info = lock_info("account:1")
    assert info.token == multi.tokens["account:1"]
    assert info.purpose == "transfer 42 (part 1 of 2: account:2, account:1)"
    assert {i.name for i in held_locks()} == {"account:1", "account:2"}
    multi.extend(20)
    assert multi.remaining() > 19
    multi.release()
    assert lock_info("account:1") is None and lock_info("account:2") is None
    assert not multi.owned() and not multi.locked() and multi.remaining() is None
    with pytest.raises(LockNotOwned):
        multi.release()

    with Lock("account:2", ttl=10):  # one name busy: none is taken
        assert not MultiLock(NAMES, ttl=10).acquire(blocking=False)
        assert lock_info("account:1") is None
        busy = pytest.raises(LockNotAcquired, match=r"lock 'account:2' within 0\.1s: it is held by")
        with busy, MultiLock(NAMES, ttl=10, timeout=0.1):
            pass


def test_it_waits_holding_nothing_and_is_woken_by_the_release(lock_backend: Any) -> None:
    holder = Lock("account:2", ttl=30)
    assert holder.acquire(blocking=False)
    multi = MultiLock(NAMES, ttl=30)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(multi.acquire(timeout=20)))
    thread.start()
    client = lock_backend.client()
    assert wait_until(lambda: multi.busy_part is not None)
    # While it waits for account:2, it does not hold account:1: another may take it.
    other = Lock("account:1", ttl=30)
    assert wait_until(lambda: other.acquire(blocking=False))
    other.release()
    holder.release()
    thread.join(20)
    assert got == [True] and multi.owned()
    # account:1 was taken and given back once (fence 1), then taken by `other` (2).
    assert multi.fences == {"account:1": 3, "account:2": 2}
    assert client.exists("redislock:{account:1}:claim") == 0
    multi.release()


def test_overlapping_multilocks_in_any_order_do_not_deadlock(lock_backend: Any) -> None:
    orders = [["a", "b"], ["b", "a"], ["b", "c"], ["c", "a", "b"]]
    done: list[int] = []
    errors: list[BaseException] = []

    def worker(names: list[str]) -> None:
        try:
            for _ in range(15):
                with MultiLock(names, ttl=10, timeout=30):
                    pass
            done.append(1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(names,)) for names in orders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == [] and len(done) == len(orders)
    assert [lock_info(n) for n in "abc"] == [None, None, None]


def test_lost_if_any_part_is_lost(lock_backend: Any) -> None:
    told: list[Any] = []
    multi = MultiLock(NAMES, ttl=0.3, watchdog=True, on_lost=told.append)
    assert multi.acquire(blocking=False)
    assert not multi.lost
    assert force_release("account:1")  # one part taken away behind its back
    assert wait_until(lambda: multi.lost, timeout=5)
    assert wait_until(lambda: told == [multi], timeout=5)
    with pytest.raises(LockLost):
        multi.check()
    with pytest.raises(LockNotOwned, match="account:1"):
        multi.release()  # the other part is released all the same
    assert lock_info("account:2") is None and told == [multi]


def test_with_raises_lock_lost_when_a_part_expired(lock_backend: Any) -> None:
    with pytest.raises(LockLost), MultiLock(NAMES, ttl=0.1) as multi:
        assert wait_until(lambda: multi.lost, timeout=5)


def test_async_twins(lock_backend: Any) -> None:
    async def main() -> None:
        async with MultiLock(NAMES, ttl=10) as multi:
            assert await multi.aowned() and await multi.alocked()
            assert not await MultiLock(["account:1", "x"], ttl=10).aacquire(blocking=False)
            await multi.aextend(20)
        assert not await multi.alocked()
        holder = Lock("account:1", ttl=10)
        assert await holder.aacquire(blocking=False)
        waiting = asyncio.ensure_future(MultiLock(NAMES, ttl=10).aacquire(timeout=10))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        await holder.arelease()
        assert await waiting

    asyncio.run(main())
    force_release("account:1")
    force_release("account:2")


def test_a_cancelled_async_acquire_leaves_nothing(lock_backend: Any) -> None:
    async def main() -> None:
        holder = Lock("account:2", ttl=10)
        assert await holder.aacquire(blocking=False)
        task = asyncio.ensure_future(MultiLock(NAMES, ttl=10).aacquire(timeout=10))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await holder.arelease()

    asyncio.run(main())
    assert lock_info("account:1") is None and lock_info("account:2") is None


@pytest.mark.django_db(transaction=True)
def test_release_waits_for_commit(lock_backend: Any) -> None:
    from django.db import transaction

    with transaction.atomic():
        with MultiLock(NAMES, ttl=10) as multi:
            pass
        assert multi.owned()  # still held: the transaction is open
    assert not multi.owned() and lock_info("account:1") is None


def test_a_forked_child_does_not_own_it(real_backend: Any) -> None:
    import os

    multi = MultiLock(NAMES, ttl=30)
    assert multi.acquire(blocking=False)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0 if not multi.owned() else 1
        try:
            multi.release()
            code += 2
        except LockNotOwned:
            pass
        os.write(write, bytes([code]))
        os._exit(0)
    os.close(write)
    result = os.read(read, 1)
    os.waitpid(pid, 0)
    assert result == b"\x00" and multi.owned()
    multi.release()


# -- a release while the server is down (the soak's first defect) ----------------------------
def _durable_default(make_server: Any, settings: Any) -> Any:
    server = make_server(appendonly=True, appendfsync="always")
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": server.url,
            "OPTIONS": {"SOCKET_TIMEOUT": 0.5, "SOCKET_CONNECT_TIMEOUT": 0.5},
        },
    }
    return server


def _release_while_down(server: Any, release: Any) -> BaseException:
    """Run ``release`` (which kills the server first), restart the server (the keys come
    back from the AOF); the error it raised."""
    try:
        release()
    except BaseException as exc:  # asserted by the caller
        error = exc
    else:
        raise AssertionError("release() with the server down did not raise")
    finally:
        server.restart()
    return error


def _assert_every_part_tried_and_left_to_expire(multi: MultiLock, error: BaseException) -> None:
    from django_redislock import LockBackendUnavailable

    assert isinstance(error, LockBackendUnavailable)
    assert "2 of 2 parts" in str(error)
    assert "account:1:" in str(error) and "account:2:" in str(error)
    assert error.aliases == ("default",)
    with pytest.raises(LockNotOwned, match="does not hold it"):
        multi.release()
    # Both keys came back with the restart; neither is renewed any more, so both expire
    # within their TTL (a part left on the watchdog stayed held until force-released).
    assert lock_info("account:1") is not None or lock_info("account:2") is not None
    assert wait_until(
        lambda: lock_info("account:1") is None and lock_info("account:2") is None, timeout=4
    )


def test_a_release_that_fails_tries_every_part_and_leaves_none_renewed(
    make_server: Any, settings: Any
) -> None:
    server = _durable_default(make_server, settings)
    multi = MultiLock(NAMES, ttl=1, watchdog=True)
    assert multi.acquire(blocking=False)
    error = _release_while_down(server, lambda: (server.kill(), multi.release()))
    _assert_every_part_tried_and_left_to_expire(multi, error)


def test_a_failing_exit_tries_every_part_and_leaves_none_renewed(
    make_server: Any, settings: Any
) -> None:
    server = _durable_default(make_server, settings)
    multi = MultiLock(NAMES, ttl=1, watchdog=True)

    def leave() -> None:
        with multi:
            server.kill()

    error = _release_while_down(server, leave)
    _assert_every_part_tried_and_left_to_expire(multi, error)


def test_a_failing_async_release_tries_every_part_and_leaves_none_renewed(
    make_server: Any, settings: Any
) -> None:
    server = _durable_default(make_server, settings)

    async def main() -> None:
        multi = MultiLock(NAMES, ttl=1, watchdog=True)
        assert await multi.aacquire(blocking=False)
        server.kill()
        try:
            with pytest.raises(Exception) as raised:
                await multi.arelease()
        finally:
            server.restart()
        error = raised.value
        # the watchdog task lives on this loop: keep it running while the keys expire
        await asyncio.to_thread(_assert_every_part_tried_and_left_to_expire, multi, error)

    asyncio.run(main())


def test_a_cancelled_async_release_still_releases_every_part(lock_backend: Any) -> None:
    async def main() -> None:
        multi = MultiLock(NAMES, ttl=30)
        assert await multi.aacquire(blocking=False)
        task = asyncio.ensure_future(multi.arelease())
        await asyncio.sleep(0)  # its first part's release is under way
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert lock_info("account:1") is None and lock_info("account:2") is None
