"""django-redis's ``cache.lock()`` as this library's lock: one setting, no code changes.

With ``CACHES[alias]["OPTIONS"]["CLIENT_CLASS"] = "django_redislock.compat.RedisLockClient"``,
``cache.lock(key, timeout=None, sleep=0.1, blocking=True, blocking_timeout=None,
thread_local=True, version=None)`` returns a :class:`CacheLock`: a :class:`~django_redislock.Lock`
with redis-py's ``Lock`` surface. What differs from redis-py's lock, and why, is in
``docs/migrating-from-cache-lock.md``; in short: the TTL stays mandatory (``timeout=None``
means the default TTL with the watchdog on), ``sleep`` is accepted and ignored (waiters are
woken by the release), and every lock has a fence and shows in the admin.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

import redis.exceptions
from django_redis.client import DefaultClient

from .exceptions import LockBackendUnavailable, LockNotOwned, RedisLockError
from .lock import Lock

PURPOSE = "cache.lock"
#: The value of ``OPTIONS["CLIENT_CLASS"]`` that switches a cache's ``lock()`` over.
CLIENT_CLASS = "django_redislock.compat.RedisLockClient"
MAX_TOKEN_LENGTH = 256


class LockError(RedisLockError, redis.exceptions.LockError):
    """redis-py's ``LockError`` where redis-py raises it; also a :class:`RedisLockError`."""

    def __init__(self, message: str = "", *, lock_name: str | None = None) -> None:
        RedisLockError.__init__(self, message, lock_name=lock_name)
        self.message = message  # as redis-py's carries it


class LockNotOwnedError(LockError, LockNotOwned, redis.exceptions.LockNotOwnedError):
    """redis-py's ``LockNotOwnedError``; also this library's :class:`LockNotOwned`."""


class BackendUnavailableError(LockBackendUnavailable, redis.exceptions.ConnectionError):
    """Redis could not be reached: this library's :class:`LockBackendUnavailable`, and a
    redis-py ``ConnectionError`` for code written against redis-py's lock."""


def _validate_token(token: object) -> str:
    if isinstance(token, bytes):
        try:
            token = token.decode("ascii")
        except UnicodeDecodeError:
            raise ValueError(f"token must be printable ASCII, not {token!r}") from None
    if not isinstance(token, str):
        raise ValueError(f"token must be a str or bytes, not {type(token).__name__}: {token!r}")
    if not 1 <= len(token) <= MAX_TOKEN_LENGTH or not token.isprintable():
        raise ValueError(
            f"token must be 1-{MAX_TOKEN_LENGTH} printable characters, not {token[:40]!r}"
        )
    return token


class CacheLock(Lock):
    """A :class:`~django_redislock.Lock` with redis-py's ``Lock`` surface (``cache.lock()``).

    ``timeout`` is redis-py's: the lock's TTL in seconds, ``None`` for the default TTL
    (``REDISLOCK["TTL"]``) renewed by the watchdog while the holder lives. ``sleep`` is
    kept for compatibility and ignored: a waiter is woken by the release.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: str,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        thread_local: bool = True,
    ) -> None:
        super().__init__(
            name,
            ttl=timeout,
            timeout=blocking_timeout,
            blocking=blocking,
            watchdog=timeout is None,  # no expiry asked for: live while the holder does
            purpose=PURPOSE,
            connection=connection,
            reentrant=False,  # redis-py's lock is not reentrant: a second acquire waits
        )
        self.blocking_timeout = self.timeout  # validated by Lock
        self.timeout = timeout  # redis-py's meaning from here on: the TTL asked for
        self.sleep = sleep
        self.thread_local = thread_local
        self._chosen_token: str | None = None

    def __repr__(self) -> str:
        return f"<CacheLock {self.name!r} {'held' if self.token else 'not held'}>"

    def _new_token(self) -> str:
        return self._chosen_token or super()._new_token()

    def _default_wait(self) -> float | None:
        # ``timeout`` is the TTL here (redis-py's meaning); the wait is blocking_timeout.
        return self.blocking_timeout

    def acquire(
        self,
        blocking: bool | None = None,
        blocking_timeout: float | None = None,
        token: str | bytes | None = None,
    ) -> bool:
        """Take the lock; False when ``blocking_timeout`` ran out (as redis-py's)."""
        self._chosen_token = None if token is None else _validate_token(token)
        try:
            return super().acquire(blocking=blocking, timeout=blocking_timeout)
        except LockBackendUnavailable as exc:
            raise _unavailable(exc) from exc
        except (LockNotOwned, LockError):
            raise
        except RedisLockError as exc:  # already held by this object
            raise LockError(str(exc), lock_name=self.name) from exc
        finally:
            self._chosen_token = None

    def release(self) -> None:
        """Release; ``LockError`` if not held, ``LockNotOwnedError`` if it expired."""
        if self.token is None:
            raise LockError("Cannot release an unlocked lock", lock_name=self.name)
        self._translated(super().release, "release")

    def extend(self, additional_time: float, replace_ttl: bool = False) -> bool:  # type: ignore[override]
        """Add ``additional_time`` seconds to the TTL left (or set it, ``replace_ttl``)."""
        if self.token is None:
            raise LockError("Cannot extend an unlocked lock", lock_name=self.name)
        ttl = float(additional_time)
        if not replace_ttl:
            left = self._translated(self.remaining, "extend")
            ttl += left or 0.0
        self._translated(lambda: Lock.extend(self, ttl), "extend")
        return True

    def reacquire(self) -> bool:
        """Reset the TTL to the lock's own (``timeout``, or the default TTL)."""
        if self.token is None:
            raise LockError("Cannot reacquire an unlocked lock", lock_name=self.name)
        self._translated(lambda: Lock.extend(self, None), "reacquire")
        return True

    def _translated(self, call: Any, action: str) -> Any:
        try:
            return call()
        except LockBackendUnavailable as exc:
            raise _unavailable(exc) from exc
        except LockNotOwned as exc:
            raise LockNotOwnedError(
                f"Cannot {action} a lock that's no longer owned", lock_name=self.name
            ) from exc

    def __enter__(self) -> CacheLock:
        if self.acquire():
            return self
        raise LockError("Unable to acquire lock within the time specified", lock_name=self.name)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


def _unavailable(exc: LockBackendUnavailable) -> BackendUnavailableError:
    return BackendUnavailableError(str(exc), lock_name=exc.lock_name, aliases=exc.aliases)


class RedisLockClient(DefaultClient):
    """django-redis's ``DefaultClient`` whose ``lock()`` is this library's lock.

    Set it as ``CACHES[alias]["OPTIONS"]["CLIENT_CLASS"]``; every other cache method
    stays django-redis's own.
    """

    def lock(
        self,
        key: str,
        version: int | None = None,
        timeout: float | None = None,
        sleep: float = 0.1,
        blocking: bool = True,
        blocking_timeout: float | None = None,
        client: Any = None,
        thread_local: bool = True,
    ) -> CacheLock:
        """A :class:`CacheLock` named ``key`` (``key@v<N>`` for another cache version)."""
        if client is not None:
            raise ValueError(
                "cache.lock(client=...) is not supported with RedisLockClient: the lock "
                "uses the cache's own connection"
            )
        own_version = getattr(self._backend, "version", None)
        name = key if version is None or version == own_version else f"{key}@v{version}"
        return CacheLock(
            name,
            connection=self._alias(),
            timeout=timeout,
            sleep=sleep,
            blocking=blocking,
            blocking_timeout=blocking_timeout,
            thread_local=thread_local,
        )

    def _alias(self) -> str:
        """The CACHES alias of this client's cache (Lock connects by alias)."""
        alias: str | None = getattr(self, "_redislock_alias", None)
        if alias is None:
            from django.conf import settings
            from django.core.cache import caches

            for name, conf in settings.CACHES.items():
                options: Any = conf.get("OPTIONS") or {}
                if options.get("CLIENT_CLASS") != CLIENT_CLASS:
                    continue
                if caches[name] is self._backend:
                    alias = name
                    break
            else:
                raise RedisLockError(
                    "RedisLockClient could not find its cache among settings.CACHES "
                    "(cache.lock() needs the cache's alias)"
                )
            self._redislock_alias = alias
        return alias
