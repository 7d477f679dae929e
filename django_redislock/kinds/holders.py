"""What every kind's holder read returns, and the read that tells the kinds apart.

Each kind keeps its main key ``P:{N}`` in a Redis type of its own (the mutex a string,
the semaphore a sorted set...), so ``TYPE`` says which kind holds a name, and a command
of one kind on another's key fails with ``WRONGTYPE`` instead of acting on it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..scripts import KEY_TYPE
from .operation import Operation, text


class HolderState(NamedTuple):
    """One holder of a lock, read from Redis in one call."""

    token: str
    #: ms of TTL left (-1: no TTL, which our locks never have).
    pttl_ms: int
    #: The holder's fence (0: none recorded).
    fence: int
    #: The holder description written at acquire time (``holder.parse_holder`` reads it).
    description: str


class WaiterState(NamedTuple):
    """One waiter of a lock, read from the records its kind keeps for its line."""

    token: str
    #: When it began to wait (seconds since the epoch), as its record says.
    since: float
    #: The description it would hold the lock with (``holder.parse_holder`` reads it).
    description: str
    #: The kind it waits as, when the record says (a read-write lock: read or write).
    kind: str | None = None


class Holders(NamedTuple):
    """Every holder of one lock (longest-held first) and the limit its kind records."""

    states: tuple[HolderState, ...]
    #: How many holders may hold it at once, when the kind says (a semaphore); else None.
    limit: int | None = None
    #: The kind to show when the holders tell it (a read-write lock: read or write).
    kind: str | None = None


def holder_state(token: Any, pttl_ms: int, fence: Any, description: Any) -> HolderState:
    """A :class:`HolderState` from script reply fields (``''`` for what is not recorded)."""
    fence_text = text(fence)
    return HolderState(
        text(token), pttl_ms, int(fence_text) if fence_text.isdigit() else 0, text(description)
    )


def key_type(key: str) -> Operation:
    """The Redis type of ``key`` (``'none'`` when absent), as text."""
    return Operation(KEY_TYPE, (key,), (), text)


__all__ = ["HolderState", "Holders", "WaiterState", "holder_state", "key_type"]
