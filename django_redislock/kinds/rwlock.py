"""The read-write lock kind: any number of readers, or one writer, never both.

Keys (all ``P:{N}...``, one hash slot): ``P:{N}`` a set of holder tokens (its Redis type
tells inspection it is a read-write lock); ``P:{N}:leases`` token -> lease expiry (the
server's clock, ms), one lease per holder; ``P:{N}:meta`` token -> ``"fence|mode|holder
description"`` (mode ``r`` or ``w``); ``P:{N}:fence`` the one fence counter of the name,
bumped for every reader and writer in grant order; ``P:{N}:queue`` / ``P:{N}:places`` the
writers in line (as the semaphore's waiters). While a writer waits, new readers wait
behind it (writers are not starved); a writer's place lapses unless renewed, so a dead
waiting writer holds readers back at most ``place_ms``. Every key but the counter
expires with the last lease or place.
"""

from __future__ import annotations

from typing import Any

from ..keys import LockKeys
from ..scripts import (
    RWLOCK_ACQUIRE,
    RWLOCK_FORCE_RELEASE,
    RWLOCK_RELEASE,
    SEMAPHORE_READ,
)
from .holders import Holders, HolderState, holder_state
from .operation import Operation, is_one, raw, text
from .queued import Queued
from .semaphore import by_grant

#: The mode letter each kind writes in its holders' metadata.
_MODES = {"read": "r", "write": "w"}


def parse_holders(reply: Any) -> Holders:
    """``semaphore_read.lua``'s reply on a read-write lock's keys: every holder in grant
    order; the kind is ``"write"`` while a writer holds it, else ``"read"``."""
    states: list[HolderState] = []
    writing = False
    for token, pttl, meta in reply:
        fence, _, rest = text(meta).partition("|")
        mode, _, description = rest.partition("|")
        writing = writing or mode == "w"
        states.append(holder_state(token, int(pttl), fence, description))
    return Holders(by_grant(states), kind="write" if writing else "read")


class ReadWrite(Queued):
    """The operations of one side (``kind``: read or write) of one read-write lock."""

    __slots__ = ("holders", "leases")

    #: ``"read"`` or ``"write"``: set by the two subclasses.
    kind = ""

    def __init__(self, keys: LockKeys, **options: Any) -> None:
        super().__init__(keys, **options)
        self.holders = keys.key
        self.leases = f"{keys.key}:leases"

    def _held(self) -> tuple[str, ...]:
        return (self.holders, self.leases, self.keys.meta)

    def _leased(self) -> tuple[str, ...]:
        return (self.leases, self.keys.meta, self.holders)

    def acquire(self, token: str, waited_ms: int = 0) -> Operation:
        """Read beside other readers, or write alone, if no writer waits ahead:
        ``Granted(fence)`` or ``Busy(wait_ms, server_ms)``."""
        return self._acquire(RWLOCK_ACQUIRE, token, waited_ms, _MODES[self.kind])

    def release(self, token: str) -> Operation:
        """Give up ``token``'s hold (the last holder out wakes the waiters): True if held."""
        return Operation(RWLOCK_RELEASE, self._held(), (token, self.keys.channel), is_one)

    def read_holders(self) -> Operation:
        """Every live holder, and whether they read or write: :class:`Holders`."""
        return Operation(SEMAPHORE_READ, (self.leases, self.keys.meta), (), parse_holders)

    def force_release(self, token: str | None = None) -> Operation:
        """Remove every holder (or ``token``'s), waking the waiters: 1, or 0 if none."""
        args = (self.keys.channel, token or "")
        return Operation(RWLOCK_FORCE_RELEASE, self._held(), args, raw)


class Read(ReadWrite):
    """A reader's operations: beside other readers, behind any waiting writer."""

    __slots__ = ()
    kind = "read"


class Write(ReadWrite):
    """A writer's operations: alone, first in the writers' line."""

    __slots__ = ()
    kind = "write"


__all__ = ["Read", "ReadWrite", "Write", "parse_holders"]
