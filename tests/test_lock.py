"""The single-node Lock against every server found and fakeredis (the contract of DESIGN §2)."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from redis.crc import key_slot

from django_redislock import (
    InvalidLockName,
    Lock,
    LockBackendUnavailable,
    LockConfigurationError,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    RedisLockError,
    lock_info,
)
from django_redislock.holder import SEPARATOR, parse_holder
from tests.support.held import held_at, token_at


def test_acquire_release_and_state(lock_backend):
    lock = Lock("report", ttl=5, purpose="nightly report")
    assert not lock.locked()
    assert lock.acquire()
    assert lock.token and lock.fence == 1
    assert lock.locked() and lock.owned()
    assert 4 < lock.remaining() <= 5
    raw = lock_backend.client()
    # One key holds the token, the fence and who holds it; it expires with the lock.
    token, fence, description = held_at(raw, lock.key)
    assert token == lock.token and fence == "1"
    holder = parse_holder(description)
    assert holder["purpose"] == "nightly report"
    assert holder["pid"] == str(os.getpid())
    assert 4000 < raw.pttl(lock.key) <= 5000 and raw.exists(lock.key + ":meta") == 0
    lock.release()
    assert lock.token is None
    assert not lock.locked() and not lock.owned()
    assert lock.remaining() is None
    # The holder goes with the lock; the fence counter stays.
    assert raw.get(lock.key + ":fence") == b"1"


def test_a_key_an_older_release_wrote_is_read_renewed_and_released(lock_backend):
    # A rolling upgrade: an older process handed the lock over with the bare token in the
    # key and the fence and holder in a hash beside it.
    raw = lock_backend.client()
    lock = Lock("older", ttl=30)
    description = SEPARATOR.join(["old-host", "7", "MainThread", "older job", "0", "0", "5000"])
    raw.set(lock.key, "old-token", px=5000)
    raw.hset(lock.key + ":meta", mapping={"fence": 7, "holder": description})
    raw.pexpire(lock.key + ":meta", 5000)
    info = lock_info("older")
    assert (info.token, info.fence, info.purpose, info.owner.host) == (
        "old-token",
        7,
        "older job",
        "old-host",
    )
    assert not Lock("older").acquire(blocking=False)
    assert lock.adopt("old-token") and lock.owned() and lock.fence == 7
    assert raw.pttl(lock.key + ":meta") > 29000  # renewed with the key: it outlives nothing
    lock.release()
    assert raw.exists(lock.key, lock.key + ":meta") == 0


def test_fence_grows_with_every_holder(lock_backend):
    fences = []
    for _ in range(5):
        with Lock("fenced") as lock:
            fences.append(lock.fence)
    assert fences == [1, 2, 3, 4, 5]
    with Lock("unfenced", fencing=False) as lock:
        assert lock.fence is None


def test_all_keys_in_one_hash_slot(lock_backend):
    with Lock("invoice:42") as lock:
        assert lock.key == "redislock:{invoice:42}"
        keys = [k.decode() for k in lock_backend.client().keys("redislock:*")]
    assert sorted(keys) == ["redislock:{invoice:42}", "redislock:{invoice:42}:fence"]
    assert len({key_slot(k.encode()) for k in keys}) == 1


def test_second_holder_is_refused(lock_backend):
    first = Lock("busy", ttl=5)
    assert first.acquire()
    second = Lock("busy", ttl=5)
    assert second.acquire(blocking=False) is False
    assert 0 < second.last_holder_ttl <= 5
    assert second.acquire(timeout=0.05) is False
    with pytest.raises(LockNotAcquired) as info, Lock("busy", timeout=0):
        pass
    assert info.value.lock_name == "busy"
    assert "held by someone else" in str(info.value)
    first.release()
    assert second.acquire(blocking=False)
    second.release()


def test_release_after_takeover_leaves_the_new_holder_alone(lock_backend):
    old = Lock("takeover", ttl=0.1)
    assert old.acquire()
    new = Lock("takeover", ttl=5, timeout=5)
    assert new.acquire()  # woken when old's TTL runs out
    raw = lock_backend.client()
    ttl_before = raw.pttl(new.key)
    with pytest.raises(LockNotOwned):
        old.release()
    with pytest.raises(LockNotOwned):
        old.extend()  # old's token is gone from the object after release
    assert token_at(raw, new.key) == new.token
    assert raw.pttl(new.key) <= ttl_before
    new.release()


def test_extend_after_takeover_raises_and_keeps_other_ttl(lock_backend):
    old = Lock("ext", ttl=0.1)
    assert old.acquire()
    new = Lock("ext", ttl=5, timeout=5)
    assert new.acquire()
    before = lock_backend.client().pttl(new.key)
    with pytest.raises(LockNotOwned):
        old.extend(60)
    assert lock_backend.client().pttl(new.key) <= before
    new.release()


def test_extend_resets_remaining_ttl(lock_backend):
    lock = Lock("extend-me", ttl=1)
    lock.acquire()
    lock.extend(30)
    assert 29 < lock.remaining() <= 30
    lock.extend()
    assert lock.remaining() <= 1
    lock.release()


def test_with_releases_and_propagates(lock_backend):
    with pytest.raises(ZeroDivisionError), Lock("boom") as lock:
        raise ZeroDivisionError
    assert lock.token is None
    assert not Lock("boom").locked()


def test_with_raises_lock_lost_when_it_expired_inside(lock_backend):
    lock = Lock("short", ttl=0.05)
    with pytest.raises(LockLost), lock:
        # Another holder takes over after our TTL ran out.
        other = Lock("short", ttl=5, timeout=5)
        assert other.acquire()
    assert other.owned()
    other.release()


def test_already_held_object_refuses_second_acquire(lock_backend):
    lock = Lock("once")
    lock.acquire()
    with pytest.raises(RedisLockError, match="already acquired"):
        lock.acquire()
    lock.release()


def test_release_without_holding(lock_backend):
    with pytest.raises(LockNotOwned, match="does not hold"):
        Lock("never").release()
    with pytest.raises(LockNotOwned):
        Lock("never").extend()


def test_acquire_is_idempotent_for_our_own_token(lock_backend):
    """A retried acquire whose first reply was lost must count as acquired."""
    from django_redislock.connection import lock_client
    from django_redislock.transports import wire

    lock = Lock("idem")
    op = lock.ops.acquire("tok")
    client = lock_client("default")
    assert wire.run(client, op) == [1, 1]
    assert wire.run(client, op) == [1, 1]
    assert lock_backend.client().get(lock.key + ":fence") == b"1"


def test_noscript_fallback(lock_backend):
    lock_backend.client().script_flush()
    with Lock("flushed") as lock:
        assert lock.owned()


def test_lock_calls_run_on_a_pooled_connection_itself(real_backend, monkeypatch):
    # redis-py's execute_command costs more than the server's work on a lock call
    # (retries, which are off, hooks, per-argument encoding): the call takes a pooled
    # connection, sends and reads. An error reply leaves that connection in the pool.
    import redis

    from django_redislock.connection import lock_client
    from django_redislock.transports import wire

    def refuse(*args, **kwargs):
        raise AssertionError(f"execute_command{args[1:3]} on the lock path")

    lock = Lock("direct", ttl=5)
    lock.acquire()
    lock.release()  # the pool has its connection now
    pool = lock_client("default").connection_pool
    [conn] = [c for c in pool._connections if c is not None]
    held = []
    for packer in (wire._pack_in_c, None):  # hiredis's packer, and redis-py's own
        with monkeypatch.context() as patch:
            patch.setattr(redis.Redis, "execute_command", refuse)
            patch.setattr(wire, "_pack_in_c", packer)
            lock.acquire()
            held.append((lock.fence, lock.token))
        assert token_at(real_backend.client(), "redislock:{direct}") == lock.token
        lock.release()
    assert [fence for fence, _ in held] == [2, 3]
    real_backend.client().hset("redislock:{direct}", "not", "a lock")
    with pytest.raises(LockConfigurationError, match="direct"):
        lock.acquire(blocking=False)
    real_backend.client().delete("redislock:{direct}")
    with lock:  # the same connection, clean after the error reply
        assert [c for c in pool._connections if c is not None] == [conn]


async def test_async_lock_calls_write_without_a_task_per_command(real_backend, monkeypatch):
    # redis-py bounds an asyncio write by the socket timeout with asyncio.wait_for, a
    # task per command on Python 3.11: a lock call writes on a healthy connection
    # itself. A connection with a health check due still goes through redis-py's path.
    import redis.asyncio

    sent = []
    own = redis.asyncio.Connection.send_packed_command

    async def counted(self, *args, **kwargs):
        sent.append(self)
        return await own(self, *args, **kwargs)

    monkeypatch.setattr(redis.asyncio.Connection, "send_packed_command", counted)
    lock = Lock("async-direct", ttl=5)
    assert await lock.aacquire()  # the first call connects (redis-py's path)
    await lock.arelease()
    sent.clear()
    assert await lock.aacquire()
    assert token_at(real_backend.client(), "redislock:{async-direct}") == lock.token
    await lock.arelease()
    assert sent == []
    [conn] = [c for c in _async_pool_connections() if c.is_connected]
    monkeypatch.setattr(conn, "health_check_interval", 30)
    assert await lock.aacquire()
    await lock.arelease()
    assert len(sent) >= 2 and set(sent) == {conn}  # both commands (and the health check)


def _async_pool_connections():
    import asyncio

    from django_redislock.connection import _async_clients

    pool = _async_clients[asyncio.get_running_loop()]["default"].connection_pool
    return [*pool._available_connections, *pool._in_use_connections]


def test_decode_responses_connection(lock_backend, settings):
    caches = dict(settings.CACHES)
    config = dict(caches["default"])
    options = dict(config.get("OPTIONS", {}))
    pool_kwargs = dict(options.get("CONNECTION_POOL_KWARGS", {}))
    pool_kwargs["decode_responses"] = True
    options["CONNECTION_POOL_KWARGS"] = pool_kwargs
    config["OPTIONS"] = options
    caches["default"] = config
    settings.CACHES = caches
    with Lock("decoded") as lock:
        assert lock.owned() and lock.fence == 1


# -- waiting and hand-off ------------------------------------------------------


def test_release_wakes_a_waiting_thread(lock_backend):
    holder = Lock("handoff", ttl=30)
    holder.acquire()
    got = threading.Event()
    waiting_started = threading.Event()

    def wait_for_it():
        lock = Lock("handoff", ttl=30, timeout=20)
        waiting_started.set()
        if lock.acquire():
            got.set()
            lock.release()

    thread = threading.Thread(target=wait_for_it)
    thread.start()
    waiting_started.wait()
    holder.release()
    # Woken by the release: long before the 30 s TTL would have freed it.
    assert got.wait(10)
    thread.join()


def test_expired_holder_wakes_a_waiter(lock_backend):
    crashed = Lock("crashed", ttl=0.2)
    crashed.acquire()  # never released: the TTL frees it
    waiter = Lock("crashed", timeout=10)
    assert waiter.acquire()
    waiter.release()


def test_waiters_without_pubsub_use_backoff(lock_backend, settings):
    settings.REDISLOCK = {**settings.REDISLOCK, "PUBSUB_WAKEUP": False}
    holder = Lock("nopubsub", ttl=30)
    holder.acquire()
    result = []
    thread = threading.Thread(target=lambda: result.append(Lock("nopubsub", timeout=10).acquire()))
    thread.start()
    holder.release()
    thread.join()
    assert result == [True]


# -- validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["", "x" * 257, "a\nb", "tab\there", "{tag}", "a}b", 42, None, b"bytes"]
)
def test_invalid_names(name):
    with pytest.raises(InvalidLockName) as info:
        Lock(name)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf"), 0.0001, True, "5"])
def test_invalid_ttl(ttl):
    with pytest.raises(ValueError, match="ttl"):
        Lock("x", ttl=ttl)


@pytest.mark.parametrize("timeout", [-1, float("nan"), float("inf"), "1"])
def test_invalid_timeout(timeout):
    with pytest.raises(ValueError, match="timeout"):
        Lock("x", timeout=timeout)
    with pytest.raises(ValueError, match="timeout"):
        Lock("x").acquire(timeout=timeout)


def test_valid_edge_names(lock_backend):
    for name in ["x" * 256, "ünïcode ✓", "spaces and :colons:", "*?[glob]"]:
        with Lock(name) as lock:
            assert lock.owned()


def test_unknown_alias_is_a_configuration_error():
    with pytest.raises(LockConfigurationError, match="nope"):
        Lock("x", connection="nope").acquire()


def test_sharded_client_is_rejected(settings):
    settings.CACHES = {
        **settings.CACHES,
        "sharded": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": ["redis://127.0.0.1:1/0", "redis://127.0.0.1:2/0"],
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.ShardClient"},
        },
    }
    with pytest.raises(LockConfigurationError, match="ShardClient"):
        Lock("x", connection="sharded").acquire()


# -- unreachable server and lost replies -----------------------------------------


def test_unreachable_server(settings, make_server):
    server = make_server()
    settings.CACHES = {
        **settings.CACHES,
        "gone": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url},
    }
    server.stop()
    with pytest.raises(LockBackendUnavailable) as info:
        Lock("x", connection="gone").acquire()
    assert info.value.aliases == ("gone",)
    assert "'gone'" in str(info.value)
    assert info.value.__cause__ is not None
    assert not isinstance(info.value, LockNotAcquired)


def test_lost_acquire_reply_leaves_no_key(settings, make_server, make_proxy):
    server = make_server()
    proxy = make_proxy(server)
    settings.CACHES = {
        **settings.CACHES,
        "flaky": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": proxy.url},
    }
    settings.REDISLOCK = {**settings.REDISLOCK, "SOCKET_TIMEOUT": 0.3}
    lock = Lock("lost-reply", connection="flaky", ttl=30)
    assert lock.acquire() and lock.release() is None  # scripts loaded, connection warm
    proxy.drop_replies(True)
    errors = []

    def acquire():
        try:
            lock.acquire()
        except LockBackendUnavailable as exc:
            errors.append(exc)

    thread = threading.Thread(target=acquire)
    thread.start()
    raw = server.client()
    # The SET lands but its reply is lost; then the network heals before the clean-up.
    for _ in range(500):
        if raw.exists(lock.key):
            break
        time.sleep(0.005)
    assert raw.exists(lock.key) == 1
    proxy.drop_replies(False)
    thread.join()
    assert len(errors) == 1
    assert raw.exists(lock.key) == 0
    assert lock.token is None


# -- async twins -----------------------------------------------------------------


async def test_async_twins(lock_backend):
    lock = Lock("async", ttl=5)
    assert await lock.aacquire()
    assert await lock.alocked() and await lock.aowned()
    assert 4 < await lock.aremaining() <= 5
    await lock.aextend(10)
    assert 9 < await lock.aremaining() <= 10
    await lock.arelease()
    assert not await lock.alocked()
    async with Lock("async") as held:
        assert held.fence == 2
    with pytest.raises(LockNotAcquired):
        async with Lock("busy-async"), Lock("busy-async", timeout=0):
            pass


async def test_async_release_wakes_async_waiter(lock_backend):
    holder = Lock("ahandoff", ttl=30)
    await holder.aacquire()
    waiter = Lock("ahandoff", timeout=20)
    task = asyncio.ensure_future(waiter.aacquire())
    await asyncio.sleep(0)  # let it make its first attempt
    await holder.arelease()
    assert await task
    await waiter.arelease()


async def test_cancelled_waiting_aacquire_leaves_nothing(lock_backend):
    holder = Lock("acancel", ttl=30)
    await holder.aacquire()
    tasks = [asyncio.ensure_future(Lock("acancel", timeout=20).aacquire()) for _ in range(20)]
    await asyncio.sleep(0.05)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await holder.arelease()
    assert lock_backend.client().exists(holder.key) == 0


async def test_cancelled_arelease_still_releases(lock_backend):
    # Cancelled at every point of its round trip (the release runs in the caller's task
    # and is sent again in a task of its own when cut short): the key always goes.
    for turns in range(1, 9):  # (a task cancelled before its first turn never ran)
        lock = Lock("arel", ttl=30)
        await lock.aacquire()
        task = asyncio.ensure_future(lock.arelease())
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for _ in range(200):  # the shielded release finishes in the background
            if not lock_backend.client().exists(lock.key):
                break
            await asyncio.sleep(0.01)
        assert lock_backend.client().exists(lock.key) == 0, f"cancelled after {turns} turns"


async def test_cancelled_mid_command_aacquire_cleans_up(lock_backend):
    for _ in range(50):
        lock = Lock("amid", ttl=30)
        task = asyncio.ensure_future(lock.aacquire())
        await asyncio.sleep(0)
        task.cancel()
        try:
            acquired = await task
        except asyncio.CancelledError:
            acquired = False
        if acquired:
            await lock.arelease()
    for _ in range(200):
        if not lock_backend.client().exists("redislock:{amid}"):
            break
        await asyncio.sleep(0.01)
    assert lock_backend.client().exists("redislock:{amid}") == 0


# -- fork safety -----------------------------------------------------------------


def in_a_forked_child(lock, also=lambda: True):
    """In a forked child, try ``lock.release()`` and ``lock.extend()``: 0 when each
    raised ``LockNotOwned`` (and ``also()`` held there), else what went wrong, coded."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        for action in (lock.release, lock.extend):
            try:
                action()
                code += 1
            except LockNotOwned:
                pass
            except BaseException:
                code += 10
        code += 0 if also() else 100
        os.write(write, bytes([code]))
        os._exit(0)
    os.close(write)
    result = os.read(read, 1)
    os.waitpid(pid, 0)
    return result[0]


def test_forked_child_cannot_release_or_extend(real_backend):
    lock = Lock("forked", ttl=30)
    lock.acquire()
    assert in_a_forked_child(lock) == 0
    assert lock.owned()
    assert real_backend.client().pttl(lock.key) > 29000 - 5000
    lock.release()


def test_a_cancelled_async_call_leaves_no_connection_half_read(make_server, make_proxy, settings):
    import gc
    import warnings

    from tests.test_redlock import _sockets_to

    proxy = make_proxy(make_server())
    settings.CACHES = {
        **settings.CACHES,
        "held": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": proxy.url},
    }
    before = _sockets_to(proxy.port)

    async def main() -> None:
        lock = Lock("cancelled-call", connection="held", ttl=5)
        assert await lock.alocked() is False  # warm: one pooled connection
        proxy.hold()  # the next command goes out, its reply does not come back
        for call in (lock.aremaining(), lock.aacquire(timeout=0)):
            task = asyncio.ensure_future(call)
            await asyncio.sleep(0.05)  # a wall-clock wait: no event marks "sent, unanswered"
            assert not task.done()
            task.cancel()
            if call.__name__ == "aacquire":
                # a cancelled acquire cleans up before the cancel completes: let it through
                proxy.release_hold()
            with pytest.raises(asyncio.CancelledError):
                await task
        # the connections given up on were closed by the library: the next call gets a
        # fresh one and reads its own reply, not a late one meant for a cancelled call
        remaining = await lock.aremaining()
        assert remaining is None or 0 < remaining <= 5

    asyncio.run(main())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
    assert _sockets_to(proxy.port) == before


def test_acquired_at_means_what_lock_info_says(lock_backend):
    # One meaning per name: an aware UTC datetime on the lock and on LockInfo alike.
    from django_redislock import lock_info

    lock = Lock("stamped", ttl=5)
    assert lock.acquired_at is None
    before = time.time()
    assert lock.acquire(blocking=False)
    stamped = lock.acquired_at
    assert stamped is not None and stamped.tzinfo is not None
    assert before - 0.001 <= stamped.timestamp() <= time.time() + 0.001
    info = lock_info("stamped")
    assert info is not None and info.acquired_at is not None
    assert abs((info.acquired_at - stamped).total_seconds()) < 1
    assert isinstance(lock.acquired_monotonic, float)
    lock.release()
    assert lock.acquired_at is None


# -- adopt: a lock handed over by token -------------------------------------------------


def test_adopt_takes_over_a_held_lock(lock_backend) -> None:
    first = Lock("handed", ttl=5)
    assert first.acquire(timeout=0)
    second = Lock("handed", ttl=10)
    assert second.adopt(first.token)
    assert second.token == first.token and second.fence == first.fence and second.owned()
    assert 9 < second.remaining() <= 10  # its own ttl from now
    second.release()
    assert not Lock("handed").locked()


def test_adopt_fails_for_a_token_that_no_longer_holds(lock_backend) -> None:
    first = Lock("handed", ttl=5)
    assert first.acquire(timeout=0)
    token = first.token
    first.release()
    assert not Lock("handed").adopt(token)
    other = Lock("handed")
    assert other.acquire(timeout=0)
    late = Lock("handed")
    assert not late.adopt(token) and late.token is None  # another holder now: left alone
    assert other.owned()
    other.release()


def test_aadopt_takes_over_and_renews_on_the_event_loop(lock_backend) -> None:
    first = Lock("handed", ttl=5)
    assert first.acquire(timeout=0)

    async def main() -> None:
        second = Lock("handed", ttl=0.3, watchdog=True)
        assert await second.aadopt(first.token)
        assert second.fence == first.fence and await second.aowned()
        renewed = second.valid_until
        # The loop's watchdog renews it (at ttl/3): the local validity moves on.
        for _ in range(200):
            if second.valid_until != renewed:
                break
            await asyncio.sleep(0.01)
        assert second.valid_until != renewed and not second.lost
        await second.arelease()
        assert not await Lock("handed").alocked()
        assert not await Lock("handed").aadopt(second.token or "gone")

    asyncio.run(main())


def test_adopt_checks_its_arguments(lock_backend) -> None:
    with pytest.raises(ValueError, match="token must be a non-empty str"):
        Lock("handed").adopt("")
    held = Lock("handed")
    assert held.acquire(timeout=0)
    with pytest.raises(RedisLockError, match="already acquired by this object"):
        held.adopt("x")
    held.release()
