"""The mutex kind: one holder at a time. Its keys and every operation on them.

Each method returns an :class:`~django_redislock.kinds.operation.Operation`
(script, keys, args, reply parser); this is the one place that knows the order
of a mutex script's KEYS and ARGV (see the comments at the top of each script).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..holder import holder_description, parse_holder
from ..keys import LockKeys
from ..scripts import (
    ACQUIRE,
    EXTEND,
    FENCE_RAISE,
    FORCE_RELEASE,
    MUTEX_WAITERS,
    READ_HOLDER,
    RELEASE,
    UNCLAIM,
)
from ..waiting import wake_id
from .holders import Holders, HolderState, WaiterState, holder_state
from .operation import Operation, is_one, raw, text
from .options import KindOptions


class Granted(NamedTuple):
    """An acquire attempt that took the lock."""

    #: The holder's fence (0 without fencing).
    fence: int
    #: The token the attempt wrote, when not the caller's (Redlock: one per attempt).
    token: str | None = None


class Busy(NamedTuple):
    """An acquire attempt refused: someone holds the lock, or a longer waiter has the turn."""

    #: ms the caller may sleep before trying again (the holder's TTL, or the claim's).
    wait_ms: int
    #: The server's clock (ms) when it refused, if it sent it: the reference a
    #: later hand-off message is measured against.
    server_ms: int | None = None
    #: Who holds the lock (``None``: free, but a longer waiter has the next turn).
    holder: HolderState | None = None

    def __bool__(self) -> bool:
        return False  # an attempt is true when granted


#: What one acquire attempt got back.
Attempt = Granted | Busy


def parse_acquire(reply: Any) -> Granted | Busy:
    """The acquire script's reply: ``{1, fence}`` or ``{0, ms, now_ms[, token, fence, holder]}``."""
    if int(reply[0]) == 1:
        return Granted(int(reply[1]))
    wait_ms = int(reply[1])
    server_ms = int(reply[2]) if len(reply) > 2 and int(reply[2]) >= 0 else None
    holder = holder_state(reply[3], wait_ms, reply[4], reply[5]) if len(reply) > 5 else None
    return Busy(wait_ms, server_ms, holder)


def parse_holders(reply: Any) -> Holders:
    """``read_holder.lua``'s reply as :class:`Holders`: none, or the one holder."""
    state = parse_holder_state(reply)
    return Holders(() if state is None else (state,))


def parse_holder_state(reply: Any) -> HolderState | None:
    """The reply of ``read_holder.lua``: ``{}`` when free, else token, pttl, fence, holder."""
    if not reply:
        return None
    token, pttl, fence, description = reply
    return holder_state(token, int(pttl), fence, description)


def parse_waiters(reply: Any) -> tuple[WaiterState, ...]:
    """``mutex_waiters.lua``'s reply: the claimant, then the line, as :class:`WaiterState`.

    A claim (``token:waited_ms:ttl_ms:fencing[/wake]:holder``) says how long its waiter
    had waited when it wrote it, and its holder description when (``acquired_at``): the
    difference is when it began to wait.
    """
    waiters = []
    for claim in reply:
        parts = text(claim).split(":", 4)
        if len(parts) < 5 or not parts[1].isdigit():
            continue  # no claim (''), or one of a format we do not know
        token, waited_ms, _, _, description = parts
        try:
            written = float(parse_holder(description).get("acquired_at", ""))
        except ValueError:
            continue
        waiters.append(WaiterState(token, written - int(waited_ms) / 1000, description))
    return tuple(waiters)


class Mutex(KindOptions):
    """The operations of one mutex (one lock name, one set of options).

    Only ``keys`` is needed to look at a lock from outside (``read_holder``,
    ``force_release``); the options shape the holder's own operations.

    ``claim_ms``: the longest waiter's claim on the next turn lives this long
    (``None``: no claims, so no hand-over at acquire: Redlock, and a ``Lock`` that
    waits for replicas). ``hand_over``: a release hands the lock to a claimant
    (``False`` for Redlock, whose waiters take turns by retrying).
    """

    __slots__ = (
        "_acquire_keys",
        "_extend_keys",
        "_release_args",
        "_release_keys",
        "_unclaim_keys",
        "claim_ms",
    )

    #: The kind's name in inspection and the registry.
    kind = "lock"

    def __init__(
        self,
        keys: LockKeys,
        *,
        claim_ms: int | None = None,
        hand_over: bool = True,
        **options: Any,
    ) -> None:
        super().__init__(keys, **options)
        self.claim_ms = claim_ms
        # With claims, the waiters behind the claimant wait in a line (scripts/line.lua).
        line = () if claim_ms is None else (keys.line,)
        claims = () if claim_ms is None else (keys.claim, keys.line)
        self._acquire_keys = (keys.key, keys.fence, keys.meta, *claims)
        self._release_keys = (
            (keys.key, keys.meta, keys.claim, keys.fence, *line)
            if hand_over
            else (keys.key, keys.meta)
        )
        self._release_args = (keys.channel, claim_ms) if line and hand_over else (keys.channel,)
        self._unclaim_keys = (keys.claim, keys.key, keys.meta, *line)
        self._extend_keys = (keys.key, keys.meta)

    @classmethod
    def of(cls, lock: Any, *, claim_ms: int | None, hand_over: bool = True) -> Mutex:
        """The mutex operations of ``lock`` (a ``BaseLock``: its keys and options)."""
        return cls(lock.keys, claim_ms=claim_ms, hand_over=hand_over, **KindOptions.read_from(lock))

    def acquire(self, token: str, waited_ms: int = 0) -> Operation:
        """Take the lock for ``token`` (``acquire.lua``); reply ``{1, fence}`` or ``{0, ...}``."""
        claims = self.claim_ms is not None
        args = (
            token,
            self.ttl_ms,
            "1" if self.fencing else "0",
            holder_description(self.purpose, self.watchdog, self.ttl_ms, self.role),
            waited_ms if claims else 0,
            self.claim_ms if claims else 0,
            wake_id() if claims else "",
        )
        return Operation(
            ACQUIRE, self._acquire_keys, args, parse_acquire, durable=True, ttl_ms=self.ttl_ms
        )

    def release(self, token: str) -> Operation:
        """Compare-token-and-delete, waking (or handing over to) the waiters: True if ours."""
        return Operation(RELEASE, self._release_keys, (token, *self._release_args), is_one)

    def extend(self, token: str, ttl_ms: int | None = None) -> Operation:
        """Reset the TTL if ``token`` still holds the lock: True if it did."""
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        return Operation(EXTEND, self._extend_keys, (token, ttl), is_one, durable=True, ttl_ms=ttl)

    def unclaim(self, token: str) -> Operation:
        """A waiter leaves: drop its claim (or release what was handed to it meanwhile)."""
        return Operation(UNCLAIM, self._unclaim_keys, (token, self.keys.channel), raw)

    def fence_raise(self, token: str, fence: int) -> Operation:
        """Raise this node's counter to ``fence`` while ``token`` holds it (Redlock): True if so."""
        return Operation(FENCE_RAISE, self._acquire_keys[:3], (token, fence), is_one)

    def read_holder(self) -> Operation:
        """Who holds the lock: a :class:`HolderState`, or ``None`` when free."""
        return Operation(READ_HOLDER, self._extend_keys, (), parse_holder_state)

    def read_holders(self) -> Operation:
        """Every holder, as every kind reads them: :class:`Holders` (none, or one)."""
        return Operation(READ_HOLDER, self._extend_keys, (), parse_holders)

    def read_waiters(self) -> Operation:
        """Who waits: the claimant and the live places of its line (:class:`WaiterState`).
        Read whatever the lock's options (a lock without claims has none to read)."""
        keys = (self.keys.claim, self.keys.line)
        return Operation(MUTEX_WAITERS, keys, (), parse_waiters)

    def force_release(self, token: str | None = None) -> Operation:
        """Delete the lock whoever holds it (or only ``token``'s): 1, 0 (free) or -1 (other)."""
        keys = self.keys
        return Operation(FORCE_RELEASE, self._extend_keys, (keys.channel, token or ""), raw)


__all__ = [
    "Attempt",
    "Busy",
    "Granted",
    "HolderState",
    "Mutex",
    "parse_acquire",
    "parse_holder_state",
    "parse_holders",
    "parse_waiters",
]
