"""What the kinds with a lease per holder and a line of waiters share (the semaphore, the
read-write lock): their options, and the waiters' line ``P:{N}:queue`` (token -> when it
first tried) with ``P:{N}:places`` (token -> when its place lapses unless renewed), and
``P:{N}:waiting`` (token -> when it began, its mode and holder description) with
``P:{N}:waiting:until`` (token -> when that record lapses): ``scripts/waiting.lua``, what
inspection reads to say who waits."""

from __future__ import annotations

from typing import Any

from ..holder import holder_description
from ..keys import LockKeys
from ..scripts import QUEUED_WAITERS, SEMAPHORE_EXTEND, SEMAPHORE_UNCLAIM, Script
from .holders import WaiterState
from .mutex import parse_acquire
from .operation import Operation, is_one, raw, text
from .options import KindOptions

#: How long a waiter's place in line lives without renewal when the lock does not say.
DEFAULT_PLACE_MS = 2_500

#: The kind a waiting record's mode letter names (``''``: the kind itself).
_WAITING_MODES = {"r": "read", "w": "write"}


def parse_waiters(reply: Any) -> tuple[WaiterState, ...]:
    """``queued_waiters.lua``'s reply (token, record pairs) as :class:`WaiterState`,
    longest waiting first; a record is ``since_ms|mode|description``."""
    waiters = []
    for token, record in zip(reply[::2], reply[1::2], strict=True):
        since, _, rest = text(record).partition("|")
        mode, _, description = rest.partition("|")
        try:
            started = float(since) / 1000
        except ValueError:
            continue
        waiters.append(WaiterState(text(token), started, description, _WAITING_MODES.get(mode)))
    return tuple(sorted(waiters, key=lambda w: (w.since, w.token)))


class Queued(KindOptions):
    """The options and the waiters' line of one lock of a leased, queued kind."""

    __slots__ = ("place_ms", "places", "queue", "waiting")

    def __init__(self, keys: LockKeys, *, place_ms: int | None = None, **options: Any) -> None:
        super().__init__(keys, **options)
        self.place_ms = DEFAULT_PLACE_MS if place_ms is None else place_ms
        self.queue = f"{keys.key}:queue"
        self.places = f"{keys.key}:places"
        self.waiting = (f"{keys.key}:waiting", f"{keys.key}:waiting:until")

    @classmethod
    def of(cls, lock: Any, *, claim_ms: int | None) -> Any:
        """The operations of ``lock`` (its keys and options, and :meth:`options_of`'s);
        ``claim_ms``: how long a waiter's place in line lives without renewal."""
        return cls(
            lock.keys, place_ms=claim_ms, **KindOptions.read_from(lock), **cls.options_of(lock)
        )

    @classmethod
    def options_of(cls, lock: Any) -> dict[str, Any]:
        """The kind's own options, read from ``lock`` (a semaphore: its limit)."""
        return {}

    def _held(self) -> tuple[str, ...]:
        """The keys of the holders (the acquire and release scripts' first keys)."""
        raise NotImplementedError

    def _leased(self) -> tuple[str, ...]:
        """The leases (token -> expiry), then the keys that expire with the last lease."""
        raise NotImplementedError

    def _acquire(self, script: Script, token: str, waited_ms: int, rule: Any) -> Operation:
        """The kind's acquire ``script`` on its holders' keys, the fence counter and the
        line; ``rule``: its last argument (a semaphore's limit, a read-write side's mode)."""
        keys = (*self._held(), self.keys.fence, self.queue, self.places, *self.waiting)
        args = (
            token,
            self.ttl_ms,
            "1" if self.fencing else "0",
            holder_description(self.purpose, self.watchdog, self.ttl_ms, self.role),
            waited_ms,
            self.place_ms,
            rule,
        )
        return Operation(script, keys, args, parse_acquire, durable=True, ttl_ms=self.ttl_ms)

    def extend(self, token: str, ttl_ms: int | None = None) -> Operation:
        """Renew ``token``'s lease: True if it still held one."""
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        return Operation(
            SEMAPHORE_EXTEND, self._leased(), (token, ttl), is_one, durable=True, ttl_ms=ttl
        )

    def unclaim(self, token: str) -> Operation:
        """A waiter leaves the line (those behind it are woken to look again)."""
        keys = (self.queue, self.places, *self.waiting)
        return Operation(SEMAPHORE_UNCLAIM, keys, (token, self.keys.channel), raw)

    def read_waiters(self) -> Operation:
        """Who waits, longest first (:class:`WaiterState`, the kind each waits as)."""
        return Operation(QUEUED_WAITERS, self.waiting, (), parse_waiters)


__all__ = ["DEFAULT_PLACE_MS", "Queued", "parse_waiters"]
