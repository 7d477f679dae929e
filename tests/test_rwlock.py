"""``ReadWriteLock``: many readers or one writer, writers not starved, a lease per holder,
the whole ``Lock`` surface on each side (DESIGN §9). Every server found and fakeredis
(``lock_backend``); the processes' test is tests/test_rwlock_processes.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from django_redislock import (
    Lock,
    LockConfigurationError,
    LockLost,
    LockNotAcquired,
    ReadWriteLock,
    Semaphore,
    force_release,
    held_locks,
    lock_info,
    locked,
)
from django_redislock.inspection import force_release_holder
from django_redislock.rwlock import ReadLock, WriteLock
from tests.support.polling import wait_until

KEYS = "redislock:{prices}*"
QUEUE = "redislock:{prices}:queue"


def _keys(backend: Any) -> list[bytes]:
    return sorted(backend.client().keys(KEYS))


def _in_thread(target: Any) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []
    thread = threading.Thread(target=lambda: got.append(target()))
    thread.start()
    return thread, got


@pytest.mark.parametrize(
    ("options", "error"),
    [({"ttl": 0}, "ttl must be > 0"), ({"timeout": -1}, "timeout"),
     ({"connection": ""}, "connection must be a cache alias")],
)  # fmt: skip
def test_bad_options_are_refused_before_any_network_call(options: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ReadWriteLock("prices", **options)
    with pytest.raises(ValueError):
        ReadWriteLock("")


def test_many_readers_or_one_writer(lock_backend: Any) -> None:
    rw = ReadWriteLock("prices", ttl=10, purpose="price list")
    readers = [rw.read_lock() for _ in range(3)]
    assert isinstance(readers[0], ReadLock) and readers[0] is not rw.read_lock()
    for reader in readers:
        assert reader.acquire(blocking=False)
    writer = rw.write_lock()
    assert isinstance(writer, WriteLock)
    assert not writer.acquire(blocking=False) and writer.locked()
    assert not readers[0].locked() and not rw.writing()
    assert [h.token for h in rw.holders()] == [r.token for r in readers]
    assert [r.fence for r in readers] == [1, 2, 3]
    assert readers[1].owned() and 9 < readers[1].remaining() <= 10
    for reader in readers:
        reader.release()
    assert writer.acquire(blocking=False) and writer.fence == 4  # one counter per name
    assert rw.writing() and rw.read_lock().locked()
    assert not rw.read_lock().acquire(blocking=False)
    assert not rw.write_lock().acquire(blocking=False)
    writer.release()
    # Nothing of a read-write lock outlives its last holder but the fence counter.
    assert _keys(lock_backend) == [b"redislock:{prices}:fence"]


def test_a_waiting_writer_goes_before_new_readers(lock_backend: Any) -> None:
    rw = ReadWriteLock("prices", ttl=30)
    first = rw.read_lock()
    assert first.acquire(blocking=False)
    writer = rw.write_lock()
    thread, got = _in_thread(lambda: writer.acquire(timeout=20))
    client = lock_backend.client()
    assert wait_until(lambda: client.zcard(QUEUE) == 1)  # the writer is in line
    late = rw.read_lock()
    assert not late.acquire(blocking=False)  # behind the writer, though only readers hold
    reader_thread, reader_got = _in_thread(lambda: late.acquire(timeout=20))
    first.release()
    thread.join(20)
    assert got == [True] and writer.fence == 2
    assert client.zcard(QUEUE) == 0  # its place went with the grant
    assert reader_thread.is_alive()  # still waiting: the writer holds it
    writer.release()
    reader_thread.join(20)
    assert reader_got == [True] and late.fence == 3
    late.release()


def test_a_writers_release_lets_every_waiting_reader_in(lock_backend: Any) -> None:
    rw = ReadWriteLock("prices", ttl=30)
    writer = rw.write_lock()
    assert writer.acquire(blocking=False)
    readers = [rw.read_lock() for _ in range(3)]
    threads = [_in_thread(lambda r=r: r.acquire(timeout=20)) for r in readers]
    client = lock_backend.client()
    assert wait_until(lambda: all(t.is_alive() for t, _ in threads))
    writer.release()
    for thread, got in threads:
        thread.join(20)
        assert got == [True]
    assert len(rw.holders()) == 3 and client.zcard(QUEUE) == 0
    for reader in readers:
        reader.release()


def test_a_dead_waiting_writer_holds_readers_back_only_until_its_place_lapses(
    lock_backend: Any,
) -> None:
    client = lock_backend.client()
    seconds, micros = client.time()
    now_ms = seconds * 1000 + micros // 1000
    # A writer that took its place in line and died: its place lapses in 300 ms.
    client.zadd(QUEUE, {"dead-writer": now_ms - 1000})
    client.zadd("redislock:{prices}:places", {"dead-writer": now_ms + 300})
    reader = ReadWriteLock("prices", ttl=10).read_lock()
    assert not reader.acquire(blocking=False)
    assert reader.acquire(timeout=10)
    assert client.zcard(QUEUE) == 0
    reader.release()
    assert _keys(lock_backend) == [b"redislock:{prices}:fence"]


def test_a_writer_that_gives_up_lets_the_readers_behind_it_in(lock_backend: Any) -> None:
    rw = ReadWriteLock("prices", ttl=30)
    first = rw.read_lock()
    assert first.acquire(blocking=False)
    client = lock_backend.client()
    writer_thread, writer_got = _in_thread(lambda: rw.write_lock().acquire(timeout=0.5))
    assert wait_until(lambda: client.zcard(QUEUE) == 1)
    late = rw.read_lock()
    reader_thread, reader_got = _in_thread(lambda: late.acquire(timeout=20))
    writer_thread.join(20)
    assert writer_got == [False] and client.zcard(QUEUE) == 0  # it left the line
    reader_thread.join(20)
    assert reader_got == [True]  # woken when the writer left, beside the first reader
    late.release()
    first.release()


def test_an_expired_reader_frees_only_itself(lock_backend: Any) -> None:
    rw = ReadWriteLock("prices", ttl=30)
    crashed = rw.read_lock(ttl=0.2)  # never released: its holder "died"
    alive = rw.read_lock()
    assert crashed.acquire(blocking=False) and alive.acquire(blocking=False)
    writer = rw.write_lock()
    assert not writer.acquire(blocking=False)
    assert alive.owned() and not wait_until(lambda: not alive.owned(), timeout=0.5)
    assert wait_until(lambda: not crashed.owned(), timeout=5)
    assert [h.token for h in rw.holders()] == [alive.token]
    alive.release()
    assert writer.acquire(blocking=False)
    writer.release()


@pytest.mark.parametrize("side", ["read_lock", "write_lock"])
def test_watchdog_lost_and_max_hold(lock_backend: Any, side: str) -> None:
    rw = ReadWriteLock("prices", ttl=0.3, watchdog=True)
    with getattr(rw, side)() as held:
        first = held.valid_until
        assert wait_until(lambda: held.valid_until > first + 0.6, timeout=5)
        assert held.owned() and not held.lost
    lost: list[Any] = []
    held = getattr(rw, side)(on_lost=lost.append)
    assert held.acquire(blocking=False)
    assert force_release("prices", token=held.token)  # taken away behind its back
    assert wait_until(lambda: lost == [held], timeout=5) and held.lost
    capped = getattr(rw, side)(max_hold=0.6)
    assert capped.acquire(blocking=False)
    assert wait_until(lambda: capped.lost, timeout=5)  # the watchdog stopped at max_hold
    # Lost is reported at the holder's own estimate, which is earlier than the server's
    # expiry by the renewal's trip; a renewing watchdog would keep it past the wait below.
    assert wait_until(lambda: not capped.owned(), timeout=1) and lock_info("prices") is None


def test_async_twins(lock_backend: Any) -> None:
    rw = ReadWriteLock("prices", ttl=10)

    async def main() -> None:
        async with rw.read_lock() as first:
            other = rw.read_lock()
            assert await other.aacquire(blocking=False)
            assert not await rw.write_lock().aacquire(blocking=False)
            assert [h.token for h in await rw.aholders()] == [first.token, other.token]
            assert await first.aowned() and 9 < await first.aremaining() <= 10
            assert await rw.write_lock().alocked() and not await first.alocked()
            await other.arelease()
        async with rw.write_lock() as writer:
            assert await rw.awriting() and await writer.aowned()
            assert not await rw.read_lock().aacquire(blocking=False)

    asyncio.run(main())
    assert lock_info("prices") is None


def test_inspection_and_force_release_of_one_reader(lock_backend: Any) -> None:
    rw = ReadWriteLock("prices", ttl=10)
    a, b = rw.read_lock(purpose="a"), rw.read_lock(purpose="b")
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    [info] = list(held_locks("prices"))
    assert (info.kind, info.limit, [h.token for h in info.holders]) == (
        "read", None, [a.token, b.token],
    )  # fmt: skip
    assert info.purpose == "a" and info.fence == a.fence
    assert force_release_holder("prices", token=a.token).released
    assert not a.owned() and b.owned()
    assert [h.purpose for h in lock_info("prices").holders] == ["b"]
    b.release()
    with pytest.raises(LockLost), rw.write_lock(purpose="rebuild") as writer:
        info = lock_info("prices")
        assert (info.kind, info.purpose, info.token) == ("write", "rebuild", writer.token)
        assert force_release("prices")
        assert not writer.owned() and lock_info("prices") is None
        # taken away: LockLost on the way out


def test_other_kinds_on_the_same_name(lock_backend: Any) -> None:
    rw_first = pytest.raises(
        LockConfigurationError, match=r"in use by a read-write lock; it was asked for as a lock"
    )
    with ReadWriteLock("shared", ttl=10).read_lock(), rw_first:
        Lock("shared", ttl=5).acquire(blocking=False)
    lock_first = pytest.raises(
        LockConfigurationError, match=r"in use by a lock; it was asked for as a read-write lock"
    )
    with Lock("shared", ttl=10), lock_first:
        ReadWriteLock("shared", ttl=5).write_lock().acquire(blocking=False)
    with (
        Semaphore("shared", 2, ttl=10),
        pytest.raises(
            LockConfigurationError, match=r"in use by a semaphore; it was asked for as a read-write"
        ),
    ):
        ReadWriteLock("shared", ttl=5).read_lock().acquire(blocking=False)


def test_the_decorator_takes_kind_read_and_write(lock_backend: Any) -> None:
    seen: list[Any] = []

    @locked("prices", kind="read", ttl=10, blocking=False)
    def read() -> None:
        seen.append(lock_info("prices").kind)

    @locked("prices", kind="write", ttl=10)
    def write() -> None:
        seen.append(lock_info("prices").kind)
        with pytest.raises(LockNotAcquired):
            read()  # not beside a writer

    with ReadWriteLock("prices", ttl=10).read_lock():
        read()  # beside another reader
    write()
    assert seen == ["read", "write"]


def test_signals_name_each_side(lock_backend: Any) -> None:
    from django_redislock.signals import lock_acquired

    seen: list[Any] = []

    def on_acquired(sender: Any, lock: Any, **kwargs: Any) -> None:
        seen.append(sender)

    lock_acquired.connect(on_acquired, dispatch_uid="rwlock-acquired")
    try:
        rw = ReadWriteLock("prices", ttl=10)
        with rw.read_lock():
            pass
        with rw.write_lock():
            pass
    finally:
        lock_acquired.disconnect(dispatch_uid="rwlock-acquired")
    assert seen == [ReadLock, WriteLock]


@pytest.mark.django_db(transaction=True)
def test_release_waits_for_commit(lock_backend: Any) -> None:
    from django.db import transaction

    with transaction.atomic():
        with ReadWriteLock("prices", ttl=10).write_lock() as writer:
            pass
        assert writer.owned()  # still held: the transaction is open
    assert not writer.owned() and lock_info("prices") is None


def test_unreachable_server_is_backend_unavailable(settings: Any) -> None:
    from django_redislock import LockBackendUnavailable

    settings.CACHES = {
        **settings.CACHES,
        "down": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"},
    }
    with pytest.raises(LockBackendUnavailable):
        ReadWriteLock("prices", connection="down", ttl=5).read_lock().acquire(blocking=False)


def test_forked_child_cannot_release_or_extend(real_backend: Any) -> None:
    from tests.test_lock import in_a_forked_child

    reader = ReadWriteLock("prices", ttl=30).read_lock()
    assert reader.acquire(blocking=False)
    assert in_a_forked_child(reader, also=lambda: not reader.owned()) == 0
    assert reader.owned() and reader.remaining() > 25
    reader.release()


def test_the_command_lists_readers_and_releases_one(lock_backend: Any) -> None:
    import json
    from io import StringIO

    from django.core.management import call_command

    def run(*args: str) -> str:
        out = StringIO()
        call_command("redislock", *args, stdout=out)
        return out.getvalue()

    rw = ReadWriteLock("prices", ttl=10)
    first, second = rw.read_lock(purpose="one"), rw.read_lock(purpose="two")
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    [entry] = json.loads(run("list", "--json"))
    assert (entry["kind"], entry["limit"], len(entry["holders"])) == ("read", None, 2)
    assert "Holder 2:" in run("inspect", "prices")
    run("release", "prices", "--yes", f"--token={second.token[:8]}")
    assert [h.token for h in lock_info("prices").holders] == [first.token]
    first.release()
    with rw.write_lock(purpose="rebuild"):
        [entry] = json.loads(run("list", "--json"))
        assert (entry["kind"], entry["holders"][0]["purpose"]) == ("write", "rebuild")
