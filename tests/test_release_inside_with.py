"""``with lock: ... lock.release()`` and then leaving the block: as with redis-py's lock,
pottery's and ``threading.Lock``, an error (``LockNotOwned``), for every kind; with an
error already propagating, that error wins (ours is logged). ``cache.lock()`` does exactly
what redis-py's own lock does, checked side by side on one server. And a Redlock TTL that
its clock-drift allowance would eat whole is refused when the lock is made."""

from __future__ import annotations

import logging
import threading

import pytest
import redis
from django.core.cache import caches

from django_redislock import (
    Lock,
    LockNotOwned,
    MultiLock,
    ReadWriteLock,
    Redlock,
    Semaphore,
    lock_info,
)
from django_redislock.compat import CLIENT_CLASS

KINDS = {
    "lock": lambda: Lock("inside", ttl=5),
    "semaphore": lambda: Semaphore("inside", limit=2, ttl=5),
    "read": lambda: ReadWriteLock("inside", ttl=5).read_lock(),
    "write": lambda: ReadWriteLock("inside", ttl=5).write_lock(),
    "multilock": lambda: MultiLock(["inside-a", "inside-b"], ttl=5),
}


def test_threading_lock_raises_too():
    """The behaviour we match."""
    lock = threading.Lock()
    with pytest.raises(RuntimeError), lock:
        lock.release()


@pytest.mark.parametrize("kind", KINDS)
def test_leaving_a_with_block_after_release_raises(lock_backend, kind):
    lock = KINDS[kind]()
    with pytest.raises(LockNotOwned, match="was released inside its with block"), lock:
        lock.release()
    assert lock_info("inside") is None and lock_info("inside-a") is None
    with lock:  # the object is usable again
        pass


@pytest.mark.parametrize("kind", KINDS)
async def test_async_too(lock_backend, kind):
    lock = KINDS[kind]()
    with pytest.raises(LockNotOwned, match="was released inside its with block"):
        async with lock:
            await lock.arelease()


def test_a_propagating_error_wins(lock_backend, caplog):
    lock = Lock("inside", ttl=5)
    with (
        caplog.at_level(logging.WARNING, logger="django_redislock"),
        pytest.raises(KeyError),
        lock,
    ):
        lock.release()
        raise KeyError("the block's own error")
    assert "was released inside its with block" in caplog.text


def test_a_with_block_that_does_not_release_is_unchanged(lock_backend):
    lock = Lock("inside", ttl=5)
    with lock:
        assert lock_info("inside") is not None
    assert lock_info("inside") is None


@pytest.fixture
def cache_lock_alias(real_backend, settings):
    caches_setting = dict(settings.CACHES)
    caches_setting["locks"] = {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": real_backend.url,
        "OPTIONS": {"CLIENT_CLASS": CLIENT_CLASS},
    }
    settings.CACHES = caches_setting
    return real_backend


def test_cache_lock_behaves_as_redis_py_does(cache_lock_alias):
    """The same block with redis-py's own lock and with ``cache.lock()``: both raise
    redis-py's ``LockError`` on the way out (not its ``LockNotOwnedError``), and both
    leave nothing behind."""
    raised = []
    with redis.Redis.from_url(cache_lock_alias.url) as client:
        theirs = client.lock("theirs", timeout=5)
        ours = caches["locks"].lock("ours", timeout=5)
        for lock in (theirs, ours):
            with pytest.raises(redis.exceptions.LockError) as caught, lock:
                lock.release()
            raised.append(isinstance(caught.value, redis.exceptions.LockNotOwnedError))
            assert not lock.locked()
    assert raised == [False, False]


def test_redlock_ttl_within_the_drift_allowance_is_refused(settings):
    settings.REDISLOCK = {"REDLOCK_CONNECTIONS": ["a", "b", "c"]}
    with pytest.raises(ValueError, match=r"ttl=0\.001s .* the minimum is 0\.003s"):
        Redlock("short", ttl=0.001)
    with pytest.raises(ValueError, match=r"the minimum is 0\.003s"):
        Redlock("short", ttl=0.002)
    assert Redlock("short", ttl=0.003).ttl == 0.003
