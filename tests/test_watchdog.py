"""The watchdog: renewals, lost-lock notice, max_hold, no leaks, fork."""

from __future__ import annotations

import asyncio
import gc
import os
import threading

import pytest

from django_redislock import Lock, LockLost, LockNotOwned
from django_redislock import watchdog as watchdog_module
from django_redislock.signals import lock_lost
from tests.support.held import token_at
from tests.support.polling import wait_until

TTL = 0.3


class LostRecorder:
    def __init__(self):
        self.event = threading.Event()
        self.calls = []

    def __call__(self, lock):
        self.calls.append(lock)
        self.event.set()


def test_watchdog_keeps_the_lock_past_its_ttl(lock_backend):
    renewed = threading.Event()
    lock = Lock("kept", ttl=TTL, watchdog=True)
    lock.acquire()
    first_deadline = lock.valid_until
    # Wait for a few renewals (valid_until moves forward) rather than sleeping.
    assert wait_until(lambda: lock.valid_until > first_deadline + 2 * TTL)
    renewed.set()
    assert lock.owned() and not lock.lost
    lock.release()
    assert not lock.locked()


def test_lost_when_the_key_is_taken_away(lock_backend):
    on_lost = LostRecorder()
    received = []
    lock_lost.connect(lambda sender, **kw: received.append(kw), weak=False, dispatch_uid="t1")
    try:
        lock = Lock("stolen", ttl=TTL, watchdog=True, on_lost=on_lost)
        lock.acquire()
        lock_backend.client().set(lock.key, b"someone-else", px=5000)
        assert on_lost.event.wait(5)
        assert lock.lost
        assert on_lost.calls == [lock]
        assert received and received[0]["lock"] is lock and "took" in received[0]["reason"]
        with pytest.raises(LockLost):
            lock.check()
        # Never revived: the other holder's key is untouched.
        assert token_at(lock_backend.client(), lock.key) == "someone-else"
    finally:
        lock_lost.disconnect(dispatch_uid="t1")


def test_with_block_raises_lock_lost(lock_backend):
    on_lost = LostRecorder()
    with pytest.raises(LockLost), Lock("lost-in-with", ttl=TTL, watchdog=True, on_lost=on_lost):
        lock_backend.client().delete("redislock:{lost-in-with}")
        assert on_lost.event.wait(5)


def test_release_wins_over_renewal(lock_backend):
    on_lost = LostRecorder()
    for _ in range(30):
        lock = Lock("race", ttl=0.05, watchdog=True, on_lost=on_lost)
        lock.acquire()
        lock.release()
    assert on_lost.calls == []
    assert lock_backend.client().exists("redislock:{race}") == 0


def test_max_hold_stops_renewing(lock_backend):
    on_lost = LostRecorder()
    lock = Lock("capped", ttl=TTL, watchdog=True, max_hold=0.5, on_lost=on_lost)
    lock.acquire()
    assert on_lost.event.wait(10)
    assert lock.lost
    assert wait_until(lambda: not lock_backend.client().exists(lock.key))
    with pytest.raises(LockNotOwned):
        lock.release()


def test_unreachable_server_marks_lost_within_ttl(make_server, settings):
    server = make_server()
    settings.CACHES = {
        **settings.CACHES,
        "frozen": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url},
    }
    settings.REDISLOCK = {**settings.REDISLOCK, "SOCKET_TIMEOUT": 0.1}
    on_lost = LostRecorder()
    lock = Lock("frozen", connection="frozen", ttl=TTL, watchdog=True, on_lost=on_lost)
    lock.acquire()
    server.pause()
    try:
        assert on_lost.event.wait(10)
        assert lock.lost
    finally:
        server.resume()
    # The key expired on the server and was not revived.
    assert wait_until(lambda: not server.client().exists(lock.key))


def test_lost_property_follows_local_validity_without_watchdog(lock_backend):
    lock = Lock("validity", ttl=0.05)
    lock.acquire()
    assert wait_until(lambda: lock.lost)
    with pytest.raises(LockLost):
        lock.__exit__(None, None, None)


def test_no_leaks_after_errors_returns_and_gc(lock_backend):
    def returns_inside():
        with Lock("leak-return", ttl=TTL, watchdog=True):
            return 1

    returns_inside()
    with pytest.raises(KeyboardInterrupt), Lock("leak-kbi", ttl=TTL, watchdog=True):
        raise KeyboardInterrupt
    held = Lock("leak-gc", ttl=TTL, watchdog=True)
    held.acquire()
    del held
    gc.collect()
    client = lock_backend.client()
    assert wait_until(lambda: not client.keys("redislock:{leak-*}"), timeout=3 * TTL + 5)
    assert wait_until(lambda: not watchdog_module.running(), timeout=5)


async def test_async_watchdog_and_cancellations(lock_backend):
    lock = Lock("async-dog", ttl=TTL, watchdog=True)
    await lock.aacquire()
    first = lock.valid_until
    for _ in range(500):
        if lock.valid_until > first + 2 * TTL:
            break
        await asyncio.sleep(0.01)
    assert lock.valid_until > first + 2 * TTL
    assert await lock.aowned()
    await lock.arelease()
    # 400 cancelled acquires and releases leave nothing behind.
    holder = Lock("async-held", ttl=30)
    await holder.aacquire()
    tasks = []
    for i in range(200):
        tasks.append(asyncio.ensure_future(Lock("async-held", timeout=30).aacquire()))
        other = Lock(f"cancel-rel-{i}", ttl=TTL, watchdog=True)
        await other.aacquire()
        tasks.append(asyncio.ensure_future(other.arelease()))
    await asyncio.sleep(0)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await holder.arelease()
    client = lock_backend.client()
    for _ in range(int((3 * TTL + 5) / 0.02)):
        if not client.keys("redislock:{*}") and not watchdog_module.running():
            break
        await asyncio.sleep(0.02)
    assert client.keys("redislock:{*}") == []
    assert not watchdog_module.running()


def test_fork_child_has_no_watchdog_and_cannot_renew(real_backend):
    lock = Lock("fork-dog", ttl=TTL, watchdog=True)
    lock.acquire()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        if watchdog_module._thread_watchdog.thread is not None:
            code |= 1
        try:
            lock.extend()
            code |= 2
        except LockNotOwned:
            pass
        except BaseException:
            code |= 4
        os.write(write, bytes([code]))
        os._exit(0)
    os.close(write)
    result = os.read(read, 1)
    os.waitpid(pid, 0)
    assert result == b"\x00"
    assert lock.owned()
    lock.release()


class _CounterKind:
    """A lock kind written from nothing but watchdog.Renewable: one key, compare-and-PEXPIRE.

    Its own operations (plain tuples) and its own transport that understands them: the
    watchdog must renew it, report it lost and release it when collected without a change
    of its own (DESIGN §8: adding a kind or a transport needs no change to the watchdog).
    """

    def __init__(self, client, name, ttl=TTL):
        self.name = name
        self.ttl = ttl
        self.validity = ttl
        self.max_hold = None
        self.acquired_monotonic = None
        self.valid_until = None
        self.on_lost = None
        self._lost = False
        self.token = None
        self.renewed_twice = threading.Event()
        self.orphan_released = threading.Event()
        self.ops = _CounterOps(name, int(ttl * 1000))
        self.transport = _CounterTransport(client, self.renewed_twice, self.orphan_released)
        self.reported: list[tuple[str, dict]] = []

    # What it tells the event stream: kept here, as a kind of our own would emit it.
    def _emit(self, type_, **fields):
        self.reported.append((type_, fields))

    def _end_hold(self, type_, reason=None):
        self.reported.append((type_, {"reason": reason}))

    def take(self):
        from django_redislock.clock import now

        self.token = "tok-" + self.name
        assert self.transport.client.set(self.name, self.token, px=self.ops.ttl_ms, nx=True)
        self.acquired_monotonic = now()
        self.valid_until = self.acquired_monotonic + self.ttl
        watchdog_module.watch(self)


class _CounterOps:
    def __init__(self, name, ttl_ms):
        self.name, self.ttl_ms = name, ttl_ms

    def extend(self, token):
        return ("extend", self.name, token, self.ttl_ms)

    def release(self, token):
        return ("release", self.name, token, 0)


class _CounterTransport:
    renew_group = None  # never batched with another lock

    def __init__(self, client, renewed_twice, released):
        self.client = client
        self.renewals = 0
        self.renewed_twice, self.released = renewed_twice, released

    def call(self, op):
        action, name, token, ttl_ms = op
        if action == "release":
            self.client.delete(name)
            self.released.set()
            return True
        if self.client.get(name) != token.encode():
            return False
        self.client.pexpire(name, ttl_ms)
        self.renewals += 1
        if self.renewals >= 2:
            self.renewed_twice.set()
        return True

    def call_many(self, ops):
        return [self.call(op) for op in ops]

    async def acall_many(self, ops):
        return self.call_many(ops)


def test_a_new_kind_needs_only_the_renewable_protocol(lock_backend):
    raw = lock_backend.client()
    kind = _CounterKind(raw, "proto-kind")
    lost = LostRecorder()
    kind.on_lost = lost
    kind.take()
    assert kind.renewed_twice.wait(10)  # renewed past its TTL
    assert raw.get("proto-kind") == b"tok-proto-kind"
    raw.set("proto-kind", "someone-else")
    assert lost.event.wait(10) and lost.calls == [kind] and kind._lost
    watchdog_module.unwatch(kind)
    types = [type_ for type_, _ in kind.reported]
    assert types[-2:] == ["renewal", "lost"] and set(types[:-2]) == {"renewal"}
    assert kind.reported[-2][1] == {"result": "lost"}

    # Collected while held: the watchdog releases it with the orphan callable.
    other = _CounterKind(raw, "proto-orphan", ttl=3)
    released = other.orphan_released
    other.take()
    del other
    gc.collect()
    assert released.wait(10)  # found at its first renewal time (ttl/3), not by expiry
    assert raw.get("proto-orphan") is None
