"""The semaphore kind: up to ``limit`` holders at once, each with a lease of its own.

Keys (all ``P:{N}...``, one hash slot): ``P:{N}`` a sorted set of holder token -> lease
expiry (the server's clock, ms): its Redis type tells inspection it is a semaphore;
``P:{N}:meta`` a hash of token -> ``"fence|limit|holder description"``; ``P:{N}:fence``
the fence counter (shared layout with the mutex); ``P:{N}:queue`` the waiters in line
(token -> when it first tried) and ``P:{N}:places`` when each waiter's place lapses
unless it renews it. Every key but the counter expires with the last lease or place.
"""

from __future__ import annotations

from typing import Any

from ..holder import parse_holder
from ..keys import LockKeys
from ..scripts import (
    SEMAPHORE_ACQUIRE,
    SEMAPHORE_FORCE_RELEASE,
    SEMAPHORE_READ,
    SEMAPHORE_RELEASE,
)
from .holders import Holders, HolderState, holder_state
from .operation import Operation, is_one, raw, text
from .queued import DEFAULT_PLACE_MS, Queued


def parse_holders(reply: Any) -> Holders:
    """``semaphore_read.lua``'s reply: every holder, longest-held first, and the limit
    the newest holder acquired with."""
    states: list[HolderState] = []
    limits: list[tuple[int, int]] = []
    for token, pttl, meta in reply:
        fence, _, rest = text(meta).partition("|")
        limit, _, description = rest.partition("|")
        state = holder_state(token, int(pttl), fence, description)
        states.append(state)
        if limit.isdigit():
            limits.append((state.fence, int(limit)))
    return Holders(by_grant(states), max(limits)[1] if limits else None)


def by_grant(states: list[HolderState]) -> tuple[HolderState, ...]:
    """Holders longest-held first: by fence, then (fencing off) by when they acquired."""
    return tuple(sorted(states, key=lambda s: (s.fence, _acquired(s), s.token)))


def _acquired(state: HolderState) -> str:
    # The holder's acquired_at stamp orders holders when fencing is off (fences all 0).
    return parse_holder(state.description).get("acquired_at", "") if state.description else ""


class Semaphore(Queued):
    """The operations of one semaphore (one name, one limit, one set of options)."""

    __slots__ = ("limit",)

    kind = "semaphore"

    def __init__(self, keys: LockKeys, *, limit: int = 1, **options: Any) -> None:
        super().__init__(keys, **options)
        self.limit = limit

    @classmethod
    def options_of(cls, lock: Any) -> dict[str, Any]:
        return {"limit": lock.limit}

    def _held(self) -> tuple[str, ...]:
        return (self.keys.key, self.keys.meta)

    _leased = _held  # the permits are the leases

    def acquire(self, token: str, waited_ms: int = 0) -> Operation:
        """Take a permit for ``token`` if fewer than ``limit`` are held and no longer
        waiter is in line: ``Granted(fence)`` or ``Busy(wait_ms, server_ms)``."""
        return self._acquire(SEMAPHORE_ACQUIRE, token, waited_ms, self.limit)

    def release(self, token: str) -> Operation:
        """Give back ``token``'s permit and wake the next in line: True if it held one."""
        keys = (*self._held(), self.queue)
        args = (token, self.keys.channel, self.limit)
        return Operation(SEMAPHORE_RELEASE, keys, args, is_one)

    def read_holders(self) -> Operation:
        """Every live permit's holder, and the limit: :class:`Holders`."""
        return Operation(SEMAPHORE_READ, self._held(), (), parse_holders)

    def force_release(self, token: str | None = None) -> Operation:
        """Remove every permit (or ``token``'s), waking the waiters: 1, or 0 if none."""
        args = (self.keys.channel, token or "")
        return Operation(SEMAPHORE_FORCE_RELEASE, self._held(), args, raw)


__all__ = ["DEFAULT_PLACE_MS", "Semaphore", "by_grant", "parse_holders"]
