"""What every kind's operations carry: the lock's keys and how a holder takes it."""

from __future__ import annotations

from typing import Any

from ..keys import LockKeys


class KindOptions:
    """The keys and the holder's options of one lock, shared by every kind's operations."""

    __slots__ = ("fencing", "keys", "purpose", "role", "ttl_ms", "watchdog")

    def __init__(
        self,
        keys: LockKeys,
        *,
        ttl_ms: int = 0,
        fencing: bool = True,
        purpose: str | None = None,
        watchdog: bool = False,
        role: str = "",
    ) -> None:
        self.keys = keys
        #: What the holder description says the holder is, beyond its kind (``"election"``).
        self.role = role
        self.ttl_ms = ttl_ms
        self.fencing = fencing
        self.purpose = purpose
        self.watchdog = watchdog

    @staticmethod
    def read_from(lock: Any) -> dict[str, Any]:
        """The keyword arguments above, read from ``lock`` (a ``BaseLock``)."""
        return {
            "ttl_ms": lock._ttl_ms,
            "fencing": lock.fencing,
            "purpose": lock.purpose,
            "watchdog": lock.watchdog,
            "role": lock._holder_role,
        }


__all__ = ["KindOptions"]
