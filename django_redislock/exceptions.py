"""Every error this package raises; all subclass :class:`RedisLockError`."""

from __future__ import annotations

from collections.abc import Sequence


class RedisLockError(Exception):
    """Base class of every error raised by django-redislock.

    ``lock_name`` names the lock the error is about, when there is one.
    """

    def __init__(self, message: str = "", *, lock_name: str | None = None) -> None:
        super().__init__(message)
        self.lock_name = lock_name


class InvalidLockName(RedisLockError, ValueError):
    """The lock name is empty, too long, not printable or contains ``{`` / ``}``."""


class LockNotAcquired(RedisLockError):
    """Someone else holds the lock and it could not be acquired within the timeout."""

    def __init__(
        self,
        message: str = "",
        *,
        lock_name: str | None = None,
        remaining: float | None = None,
    ) -> None:
        super().__init__(message, lock_name=lock_name)
        #: Seconds of TTL the holder had left when we gave up (``None`` if unknown).
        self.remaining = remaining


class LockNotOwned(RedisLockError):
    """``release()`` / ``extend()`` on a lock this object does not hold (any more)."""


class LockLost(RedisLockError):
    """The lock was taken away or expired while this object believed it held it."""


class LockBackendUnavailable(RedisLockError):
    """The Redis server(s) behind the lock could not be reached.

    ``aliases`` names the connection aliases that failed; the original error is
    chained as ``__cause__``. Distinct from :class:`LockNotAcquired`, which means
    someone else holds the lock.
    """

    def __init__(
        self,
        message: str = "",
        *,
        lock_name: str | None = None,
        aliases: Sequence[str] = (),
    ) -> None:
        super().__init__(message, lock_name=lock_name)
        self.aliases = tuple(aliases)


class StaleFence(RedisLockError):
    """A fenced write was rejected: a newer lock holder already wrote."""

    def __init__(
        self, message: str = "", *, lock_name: str | None = None, fence: int | None = None
    ) -> None:
        super().__init__(message, lock_name=lock_name)
        self.fence = fence


class LockConfigurationError(RedisLockError):
    """The settings do not describe a usable lock connection (alias, client type), or a
    lock name is in use by another kind of lock (a ``Lock`` and a ``Semaphore`` on one name)."""
