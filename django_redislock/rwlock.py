"""``ReadWriteLock``: any number of readers, or one writer, never both.

The read-write kind (:mod:`django_redislock.kinds.rwlock`) over one server, on the same
engine as :class:`~django_redislock.Lock`. ``rw.read_lock()`` and ``rw.write_lock()``
return new lock objects (:class:`ReadLock`, :class:`WriteLock`), each one holder with the
whole ``Lock`` surface. Writers are not starved: once a writer waits, new readers wait
behind it. See docs/kinds.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .inspection import LockHolder
from .kinds.interface import KindOperations
from .kinds.rwlock import Read, Write
from .shared import SharedLock


class ReadLock(SharedLock):
    """A reader of a read-write lock: held beside other readers, never with a writer."""

    operations: type[KindOperations] = Read

    def locked(self) -> bool:
        """True while a writer holds the lock (a reader would have to wait)."""
        return self._read().kind == "write"

    async def alocked(self) -> bool:
        """Async twin of :meth:`locked`."""
        return (await self._aread()).kind == "write"

    def __repr__(self) -> str:
        return f"<ReadLock {self.name!r} {'held' if self.token else 'not held'}>"


class WriteLock(SharedLock):
    """The writer of a read-write lock: held alone, by one writer, with no readers."""

    operations: type[KindOperations] = Write

    def locked(self) -> bool:
        """True while anyone (readers or a writer) holds the lock."""
        return bool(self._read().states)

    async def alocked(self) -> bool:
        """Async twin of :meth:`locked`."""
        return bool((await self._aread()).states)

    def __repr__(self) -> str:
        return f"<WriteLock {self.name!r} {'held' if self.token else 'not held'}>"


class ReadWriteLock:
    """Many readers or one writer of ``name``, on one Redis server.

    Holds no lock itself: :meth:`read_lock` and :meth:`write_lock` make the lock objects
    (each one holder), with these options unless overridden. Writers are not starved:
    once a writer waits, new readers wait behind it; a waiting writer that dies holds
    them back at most a few seconds. Each reader has a lease of its own; fences come from
    one counter per name and grow in grant order across readers and writers.
    """

    def __init__(
        self,
        name: str,
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
        self._options: dict[str, Any] = {
            "ttl": ttl,
            "timeout": timeout,
            "blocking": blocking,
            "watchdog": watchdog,
            "connection": connection,
            "fencing": fencing,
            "purpose": purpose,
            "on_lost": on_lost,
            "max_hold": max_hold,
            "metrics_name": metrics_name,
        }
        # Bad options fail here, not at the first read_lock() (no network call).
        probe = WriteLock(name, **self._options)
        self.name = probe.name
        self.connection = probe.connection

    def read_lock(self, **overrides: Any) -> ReadLock:
        """A new reader (this lock's options, with ``overrides``: ``timeout=`` ...)."""
        return ReadLock(self.name, **{**self._options, **overrides})

    def write_lock(self, **overrides: Any) -> WriteLock:
        """A new writer (this lock's options, with ``overrides``: ``timeout=`` ...)."""
        return WriteLock(self.name, **{**self._options, **overrides})

    def holders(self) -> list[LockHolder]:
        """Every holder now, longest-held first (readers, or the one writer)."""
        return self.read_lock().holders()

    async def aholders(self) -> list[LockHolder]:
        """Async twin of :meth:`holders`."""
        return await self.read_lock().aholders()

    def writing(self) -> bool:
        """True while a writer holds the lock."""
        return self.read_lock().locked()

    async def awriting(self) -> bool:
        """Async twin of :meth:`writing`."""
        return await self.read_lock().alocked()

    def __repr__(self) -> str:
        return f"<ReadWriteLock {self.name!r}>"


__all__ = ["ReadLock", "ReadWriteLock", "WriteLock"]
