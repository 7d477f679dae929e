"""``Semaphore``: at most ``limit`` holders at once, each with a permit of its own.

The semaphore kind (:mod:`django_redislock.kinds.semaphore`) over one server, on the
same engine as :class:`~django_redislock.Lock`: waiting woken by releases, the watchdog,
``lost`` / ``on_lost`` / ``max_hold``, signals, release after commit, ``with`` /
``async with``. See docs/kinds.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .kinds.interface import KindOperations
from .kinds.semaphore import Semaphore as SemaphoreOperations
from .shared import SharedLock


def _validate_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise ValueError(f"limit must be an int >= 1, not {limit!r}")
    if limit < 1:
        raise ValueError(f"limit must be >= 1, not {limit!r}")
    return limit


class Semaphore(SharedLock):
    """A counting lock on one Redis server: at most ``limit`` holders at once.

    Each object holds at most one permit at a time, with the whole ``Lock`` surface;
    each permit has a lease of its own (a crashed holder frees only its own permit,
    after its TTL). Waiters are woken by releases and served longest-waiter first.
    The limit is the caller's: an acquire succeeds when fewer than its ``limit``
    permits are held. See docs/kinds.md.
    """

    operations: type[KindOperations] = SemaphoreOperations

    def __init__(
        self,
        name: str,
        limit: int,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        blocking: bool = True,
        watchdog: bool | None = None,
        connection: str | None = None,
        fencing: bool = True,
        purpose: str | None = None,
        on_lost: Callable[[Any], Any] | None = None,
        max_hold: float | None = None,
        metrics_name: str | None = None,
    ) -> None:
        self.limit = _validate_limit(limit)
        super().__init__(
            name,
            ttl=ttl,
            timeout=timeout,
            blocking=blocking,
            watchdog=watchdog,
            connection=connection,
            fencing=fencing,
            purpose=purpose,
            on_lost=on_lost,
            max_hold=max_hold,
            metrics_name=metrics_name,
            reentrant=False,  # one permit per object: a re-entry would share it
        )

    # -- queries ------------------------------------------------------------------------
    def available(self) -> int:
        """Permits free now for this object's limit (0 when ``limit`` or more are held)."""
        return max(0, self.limit - len(self._read().states))

    async def aavailable(self) -> int:
        """Async twin of :meth:`available`."""
        return max(0, self.limit - len((await self._aread()).states))

    def locked(self) -> bool:
        """True when no permit is free for this object's limit."""
        return self.available() == 0

    async def alocked(self) -> bool:
        """Async twin of :meth:`locked`."""
        return await self.aavailable() == 0

    def __repr__(self) -> str:
        state = "holding a permit" if self.token else "not held"
        return f"<Semaphore {self.name!r} limit {self.limit} {state}>"


__all__ = ["Semaphore"]
