"""What a lock kind offers the engine: its operations on one lock's keys.

The engine (``BaseLock``, the protocol, the watchdog, inspection) asks a kind for these
and nothing else; :class:`~django_redislock.kinds.mutex.Mutex` is the reference. Each
method returns an :class:`~django_redislock.kinds.operation.Operation`; a transport sends
it. See docs/architecture.md, "Adding a lock kind".
"""

from __future__ import annotations

from typing import Any, Protocol

from ..keys import LockKeys
from .operation import Operation


class KindOperations(Protocol):
    """The operations of one lock of a kind (one name, one set of options)."""

    #: The kind's name: ``LockInfo.kind`` and the registry's key.
    kind: str
    keys: LockKeys
    #: The holder's TTL (ms) its acquire and extend give.
    ttl_ms: int
    fencing: bool

    @classmethod
    def of(cls, lock: Any, *, claim_ms: int | None) -> Any:
        """The operations of ``lock`` (a ``BaseLock``: its keys and options)."""

    def acquire(self, token: str, waited_ms: int = 0) -> Operation:
        """Try once for ``token``: parses to ``Granted(fence)`` or ``Busy(wait_ms, ...)``."""

    def release(self, token: str) -> Operation:
        """Give up ``token``'s hold and wake waiters: parses to True if it held."""

    def extend(self, token: str, ttl_ms: int | None = None) -> Operation:
        """Renew ``token``'s lease: True if it still held."""

    def unclaim(self, token: str) -> Operation:
        """A waiter leaves: drop whatever it left in Redis (a claim on the next turn)."""

    def read_holders(self) -> Operation:
        """Every holder: parses to :class:`~django_redislock.kinds.holders.Holders`."""

    # Optional: ``read_waiters()``, who waits (parses to a tuple of
    # ``kinds.holders.WaiterState``). Inspection sends it beside ``read_holders`` when a
    # kind has it; a kind without it shows no waiters.

    def force_release(self, token: str | None = None) -> Operation:
        """Remove every holder (or ``token``'s): 1 removed, 0 not held, -1 another holds."""


__all__ = ["KindOperations"]
