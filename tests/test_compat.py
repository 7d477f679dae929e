"""``cache.lock()`` through ``django_redislock.compat.RedisLockClient``.

The call patterns of redis-py's own lock tests (``tests/test_lock.py`` in redis-py),
written against DESIGN §12 and run through ``cache.lock()`` with the setting on; where
redis-py's test relies on a lock without a TTL, the documented meaning is asserted instead.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis.exceptions
from django.core.cache import caches
from django_redis import get_redis_connection

from django_redislock import LockBackendUnavailable, LockNotOwned, RedisLockError, held_locks
from django_redislock.compat import CacheLock, LockError, LockNotOwnedError
from django_redislock.conf import get_config
from tests.support.held import token_at

CLIENT = "django_redislock.compat.RedisLockClient"


def _cache_settings(location: str, **options: Any) -> dict[str, Any]:
    return {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": location,
        "OPTIONS": {"CLIENT_CLASS": CLIENT, **options},
    }


@pytest.fixture
def cache(settings: Any) -> Any:
    """A cache named "compat" on the default server, with the one setting on."""
    settings.CACHES = {
        **settings.CACHES,
        "compat": _cache_settings(settings.CACHES["default"]["LOCATION"]),
    }
    return caches["compat"]


@pytest.fixture
def r() -> Any:
    return get_redis_connection("default")


def test_the_switch_is_real(cache: Any, settings: Any) -> None:
    lock = cache.lock("switched")
    assert isinstance(lock, CacheLock)
    with lock:
        (info,) = [i for i in held_locks() if i.name == "switched"]
        assert info.purpose == "cache.lock" and info.fence == lock.fence
    # Without the setting, cache.lock() is django-redis's own (redis-py's Lock).
    assert type(caches["default"].lock("plain")).__module__ == "redis.lock"


def test_lock(cache: Any, r: Any) -> None:
    lock = cache.lock("foo")
    assert lock.acquire(blocking=False)
    assert token_at(r, lock.key) == lock.token
    assert r.pttl(lock.key) > 0
    lock.release()
    assert r.get(lock.key) is None


def test_lock_token(cache: Any, r: Any) -> None:
    lock = cache.lock("foo")
    assert lock.acquire(blocking=False, token="test-token")
    assert token_at(r, lock.key) == "test-token" and lock.token == "test-token"
    assert lock.owned()
    lock.release()
    assert lock.acquire(blocking=False, token=b"bytes-token")
    assert token_at(r, lock.key) == "bytes-token"
    lock.release()
    assert lock.acquire(blocking=False)  # a fresh random token again
    assert lock.token not in ("test-token", "bytes-token")
    lock.release()


@pytest.mark.parametrize("token", ["", "x" * 257, "tab\there", b"\xff", 42])
def test_a_bad_token_is_named(cache: Any, token: Any) -> None:
    with pytest.raises(ValueError, match="token must be"):
        cache.lock("foo").acquire(blocking=False, token=token)


def test_locked_and_owned(cache: Any) -> None:
    lock, other = cache.lock("foo"), cache.lock("foo")
    assert not lock.locked() and not lock.owned()
    assert lock.acquire(blocking=False)
    assert lock.locked() and lock.owned()
    assert other.locked() and not other.owned()
    lock.release()
    assert not lock.locked() and not lock.owned()


def test_competing_locks(cache: Any) -> None:
    lock1, lock2 = cache.lock("foo"), cache.lock("foo")
    assert lock1.acquire(blocking=False)
    assert not lock2.acquire(blocking=False)
    lock1.release()
    assert lock2.acquire(blocking=False)
    assert not lock1.acquire(blocking=False)
    lock2.release()


def test_timeout(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl(lock.key) <= 10000
    assert lock.timeout == 10 and not lock.watchdog
    lock.release()


def test_float_timeout(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=9.5)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl(lock.key) <= 9500
    lock.release()


def test_no_timeout_means_the_default_ttl_renewed(cache: Any, r: Any) -> None:
    # redis-py: a lock that never expires. Here: the default TTL, renewed by the watchdog.
    lock = cache.lock("foo")
    assert lock.timeout is None and lock.watchdog
    assert lock.acquire(blocking=False)
    assert 0 < r.pttl(lock.key) <= get_config()["TTL"] * 1000
    lock.release()


def test_blocking(cache: Any) -> None:
    lock = cache.lock("foo", blocking=False)
    assert not lock.blocking
    assert lock.acquire()
    assert not cache.lock("foo", blocking=False).acquire()
    lock.release()


def test_blocking_timeout(cache: Any) -> None:
    lock1 = cache.lock("foo")
    assert lock1.acquire(blocking=False)
    lock2 = cache.lock("foo", blocking_timeout=0.2)
    assert lock2.blocking_timeout == 0.2
    started = time.monotonic()
    assert not lock2.acquire()
    assert time.monotonic() - started >= 0.2  # it waited, it did not give up at once
    assert not lock2.acquire(blocking_timeout=0)
    lock1.release()


def test_sleep_is_accepted_and_a_release_wakes_the_waiter(cache: Any) -> None:
    import threading

    holder = cache.lock("foo")
    assert holder.acquire()
    waiter = cache.lock("foo", sleep=30, blocking_timeout=20)  # a 30 s poll in redis-py
    assert waiter.sleep == 30
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire()))
    thread.start()
    holder.release()
    thread.join(20)
    assert got == [True]  # woken by the release, long before any 30 s poll
    waiter.release()


def test_context_manager(cache: Any, r: Any) -> None:
    with cache.lock("foo") as lock:
        assert token_at(r, lock.key) == lock.token
    assert r.get(lock.key) is None


def test_context_manager_raises_when_locked_not_acquired(cache: Any) -> None:
    holder = cache.lock("foo")
    assert holder.acquire()
    busy = cache.lock("foo", blocking_timeout=0.1)
    with pytest.raises(redis.exceptions.LockError) as excinfo, busy:
        pass
    assert isinstance(excinfo.value, RedisLockError) and excinfo.value.lock_name == "foo"
    holder.release()


def test_releasing_unlocked_lock_raises_error(cache: Any) -> None:
    lock = cache.lock("foo")
    with pytest.raises(LockError) as excinfo:
        lock.release()
    assert isinstance(excinfo.value, redis.exceptions.LockError)
    assert excinfo.value.lock_name == "foo"


def test_releasing_lock_no_longer_owned_raises_error(cache: Any, r: Any) -> None:
    lock = cache.lock("foo")
    lock.acquire(blocking=False)
    r.set(lock.key, "a")  # someone else's token now
    with pytest.raises(redis.exceptions.LockNotOwnedError) as excinfo:
        lock.release()
    # Both except clauses work: redis-py's and this library's.
    assert isinstance(excinfo.value, LockNotOwned) and isinstance(excinfo.value, LockNotOwnedError)
    assert isinstance(excinfo.value, redis.exceptions.LockError)
    assert token_at(r, lock.key) == "a"  # not deleted


def test_extend_lock(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert 8000 < r.pttl(lock.key) <= 10000
    assert lock.extend(10)
    assert 16000 < r.pttl(lock.key) <= 20000
    lock.release()


def test_extend_lock_replace_ttl(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert lock.extend(10, replace_ttl=True)
    assert 8000 < r.pttl(lock.key) <= 10000
    lock.release()


def test_extend_lock_float(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=10.5)
    assert lock.acquire(blocking=False)
    assert lock.extend(10.5)
    assert 16000 < r.pttl(lock.key) <= 21000
    lock.release()


def test_extending_unlocked_lock_raises_error(cache: Any) -> None:
    with pytest.raises(redis.exceptions.LockError):
        cache.lock("foo", timeout=10).extend(10)


def test_extending_lock_no_longer_owned_raises_error(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=10)
    assert lock.acquire(blocking=False)
    r.set(lock.key, "a")
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.extend(10)


def test_reacquire_lock(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=10)
    assert lock.acquire(blocking=False)
    assert r.pexpire(lock.key, 5000)
    assert r.pttl(lock.key) <= 5000
    assert lock.reacquire()
    assert 8000 < r.pttl(lock.key) <= 10000
    lock.release()


def test_reacquiring_unlocked_lock_raises_error(cache: Any) -> None:
    with pytest.raises(redis.exceptions.LockError):
        cache.lock("foo", timeout=10).reacquire()


def test_reacquiring_lock_no_longer_owned_raises_error(cache: Any, r: Any) -> None:
    lock = cache.lock("foo", timeout=10)
    assert lock.acquire(blocking=False)
    r.set(lock.key, "a")
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        lock.reacquire()


def test_a_decode_responses_cache(settings: Any) -> None:
    options = {"CONNECTION_POOL_KWARGS": {"decode_responses": True}}
    location = settings.CACHES["default"]["LOCATION"]
    settings.CACHES = {**settings.CACHES, "decoding": _cache_settings(location, **options)}
    lock = caches["decoding"].lock("foo", timeout=10)
    assert lock.acquire(blocking=False) and lock.owned() and lock.locked()
    assert lock.extend(5) and lock.reacquire()
    lock.release()


def test_versions_map_to_names(cache: Any) -> None:
    assert cache.lock("report").name == "report"
    assert cache.lock("report", version=cache.version).name == "report"
    other = cache.lock("report", version=cache.version + 1)
    assert other.name == f"report@v{cache.version + 1}"
    with cache.lock("report"):
        assert other.acquire(blocking=False)  # another version, another lock
        other.release()


def test_a_client_argument_is_refused(cache: Any) -> None:
    with pytest.raises(ValueError, match="client="):
        cache.client.lock("foo", client=object())


def test_backend_failures_stay_distinct(settings: Any) -> None:
    settings.CACHES = {**settings.CACHES, "down": _cache_settings("redis://127.0.0.1:1/0")}
    lock = caches["down"].lock("foo", timeout=1)
    with pytest.raises(redis.exceptions.ConnectionError) as excinfo:
        lock.acquire(blocking=False)
    assert isinstance(excinfo.value, LockBackendUnavailable)
    assert not isinstance(excinfo.value, redis.exceptions.LockError)


@pytest.mark.parametrize(
    ("backend", "errors"),
    [
        ("django_redis.cache.RedisCache", []),
        ("django.core.cache.backends.redis.RedisCache", ["redislock.E007"]),
        ("django_prometheus.cache.backends.redis.RedisCache", []),
        ("django_prometheus.cache.backends.redis.NativeRedisCache", ["redislock.E007"]),
        ("no.such.Backend", ["redislock.E007"]),
    ],
)
def test_the_system_check_names_a_cache_without_lock(
    settings: Any, backend: str, errors: list[str]
) -> None:
    from django_redislock.checks import check_cache_lock_clients

    settings.CACHES = {
        **settings.CACHES,
        "locks": {**_cache_settings("redis://127.0.0.1:1/0"), "BACKEND": backend},
    }
    found = check_cache_lock_clients()
    assert [m.id for m in found] == errors
    assert all("'locks'" in m.msg and "django_redis.cache.RedisCache" in m.hint for m in found)


def test_the_setting_works_on_django_prometheus_redis_cache(settings: Any) -> None:
    location = settings.CACHES["default"]["LOCATION"]
    backend = "django_prometheus.cache.backends.redis.RedisCache"
    settings.CACHES = {
        **settings.CACHES,
        "metered": {**_cache_settings(location), "BACKEND": backend},
    }
    cache = caches["metered"]
    assert type(cache).__module__ == "django_prometheus.cache.backends.redis"
    cache.set("counted", 1)  # the backend's own methods still work
    assert cache.get("counted") == 1
    with cache.lock("metered-lock", timeout=10) as lock:
        assert isinstance(lock, CacheLock)
        assert [i.purpose for i in held_locks() if i.name == "metered-lock"] == ["cache.lock"]
