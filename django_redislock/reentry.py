"""Reentrant ownership: which owner (process + thread for sync code, process + asyncio
task for async code) holds which lock, and how many times it entered.

Only locks made with ``reentrant=True`` take part. The first acquire of an owner goes to
Redis and makes that lock object the *carrier* of a :class:`Hold` (its token, fence,
watchdog); a re-entry by the same owner (through the same object or another one with the
same name, kind, connection and prefix) counts and shares the carrier's token and fence
with no round trip. The key is released, by the carrier, when the count returns to zero.
The owner includes the process id, so a forked child never finds its parent's holds.
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from .exceptions import LockNotOwned

_holds: dict[tuple[Any, ...], Hold] = {}
_guard = threading.Lock()


class Hold:
    """One owner's hold of one lock: the object that took it in Redis and the count."""

    __slots__ = ("carrier", "count", "key")

    def __init__(self, carrier: Any, key: tuple[Any, ...]) -> None:
        self.carrier = carrier
        self.count = 1
        self.key = key


def _owner(in_loop: bool) -> tuple[Any, ...]:
    task = asyncio.current_task() if in_loop else None
    if task is not None:
        return (os.getpid(), task)
    return (os.getpid(), threading.current_thread())


def _key(lock: Any, in_loop: bool) -> tuple[Any, ...]:
    return (*_owner(in_loop), lock.ops.kind, lock.connection, lock.key)


def _live(carrier: Any) -> bool:
    return carrier.token is not None and carrier._may_own() and not carrier.lost


def enter(lock: Any, *, in_loop: bool) -> bool:
    """Re-enter ``lock`` if its owner holds its name now: True (counted, no round trip)."""
    key = _key(lock, in_loop)
    with _guard:
        hold = _holds.get(key)
        if hold is None or not _live(hold.carrier):
            return False
        if lock._hold is not None and lock._hold is not hold:
            return False  # this object is inside another owner's hold: not ours to count
        hold.count += 1
    if lock._hold is None:  # another object of the same owner and name: it shares the hold
        carrier = hold.carrier
        lock._hold = hold
        lock.token, lock.fence = carrier.token, carrier.fence
        lock._owner_pid = carrier._owner_pid
        lock.acquired_monotonic = carrier.acquired_monotonic
        lock._acquired_wall = carrier._acquired_wall
        lock.valid_until = carrier.valid_until
    lock._depth += 1
    return True


def took(lock: Any, *, in_loop: bool) -> None:
    """``lock`` took its name in Redis: it carries its owner's hold (count 1)."""
    key = _key(lock, in_loop)
    hold = Hold(lock, key)
    with _guard:
        _holds[key] = hold  # replaces a hold whose carrier lost the lock
    lock._hold = hold
    lock._depth = 1


def leave(lock: Any) -> Any:
    """One exit of ``lock``: the carrier to release in Redis when the count reached zero,
    else ``None`` (the owner is still inside). ``LockNotOwned`` if this object has left
    already (its carrier still holds the name for its owner's other entries)."""
    hold: Hold = lock._hold
    if lock._depth == 0:
        raise LockNotOwned(
            f"Cannot release lock {lock.name!r}: this object released it already (other "
            "entries of its owner still hold it).",
            lock_name=lock.name,
        )
    lock._depth -= 1
    with _guard:
        hold.count -= 1
        last = hold.count == 0
        if last and _holds.get(hold.key) is hold:
            del _holds[hold.key]
    if lock._depth == 0 and lock is not hold.carrier:
        lock._hold, lock.token, lock._owner_pid, lock.valid_until = None, None, None, None
    return hold.carrier if last else None


def count(lock: Any) -> int:
    """How many times ``lock``'s owner is inside the hold ``lock`` takes part in (0: none)."""
    hold = lock._hold
    return 0 if hold is None else hold.count


__all__ = ["Hold", "count", "enter", "leave", "took"]
