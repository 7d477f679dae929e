"""``SharedLock``: a ``Lock`` whose name several holders may hold at once (a semaphore's
permits, a read-write lock's readers), each with a lease of its own.

Its queries read every holder in one script call (the kind's ``read_holders``) and find
this object's own lease among them by token.
"""

from __future__ import annotations

from redis.exceptions import RedisError

from . import drivers, protocol
from .inspection import LockHolder, holder_from_state
from .kinds.holders import Holders
from .lock import Lock


class SharedLock(Lock):
    """A ``Lock`` of a kind with several holders at once; one object is one holder."""

    def _read(self) -> Holders:
        read: Holders = self._query(lambda _client: self.transport.call(self.ops.read_holders()))
        return read

    async def _aread(self) -> Holders:
        try:
            read: Holders = await self.transport.acall(self.ops.read_holders())
        except RedisError as exc:
            raise await drivers.arun(protocol.refused(self, exc)) from exc
        return read

    def holders(self) -> list[LockHolder]:
        """Every holder now (``LockHolder`` records), longest-held first."""
        return _records(self._read())

    async def aholders(self) -> list[LockHolder]:
        """Async twin of :meth:`holders`."""
        return _records(await self._aread())

    def owned(self) -> bool:
        """True if this object holds a live lease right now (checked in Redis)."""
        return self._own_pttl(self._read()) is not None if self._may_own() else False

    async def aowned(self) -> bool:
        """Async twin of :meth:`owned`."""
        return self._own_pttl(await self._aread()) is not None if self._may_own() else False

    def remaining(self) -> float | None:
        """Seconds left on this object's lease, or ``None`` when it holds none."""
        return _seconds(self._own_pttl(self._read())) if self._may_own() else None

    async def aremaining(self) -> float | None:
        """Async twin of :meth:`remaining`."""
        return _seconds(self._own_pttl(await self._aread())) if self._may_own() else None

    def _own_pttl(self, read: Holders) -> int | None:
        return next((s.pttl_ms for s in read.states if s.token == self.token), None)


def _records(read: Holders) -> list[LockHolder]:
    return [holder_from_state(state) for state in read.states]


def _seconds(pttl_ms: int | None) -> float | None:
    return None if pttl_ms is None or pttl_ms < 0 else pttl_ms / 1000


__all__ = ["SharedLock"]
