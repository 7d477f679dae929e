"""Leader election: exactly one of many processes leads, on today's :class:`~.lock.Lock`.

Leadership is a watchdog-renewed, fenced lock named after the election. Each term is a
new lock object; its fence is the term, so terms strictly grow across leaders. A leader
that cannot renew (the key was taken, or Redis stayed unreachable until the lease ran
out) is told once through ``on_lost``; ``is_leader`` follows the lock's ``lost`` rule, so
it turns False no later than the local validity ends, even in a starved process whose
watchdog could not run.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any

from . import drivers, events, protocol
from .exceptions import LockNotOwned
from .holder import hostname
from .inspection import LockInfo, alock_info, lock_info
from .keys import validate_name
from .lock import Lock
from .steps import Step

logger = logging.getLogger("django_redislock.election")

Callback = Callable[["Election"], Any]


class LeaderLease(Lock):
    """One term's lease: a :class:`~.lock.Lock` whose events and metrics are the
    election's, and whose holder description says so (inspection and the admin show it
    as kind ``"election"``, its fence as the term)."""

    _event_kind = "election"
    _holder_role = "election"


class Election:
    """Campaign for leadership of ``name``; one leader at a time across every process.

    ``identity`` (default ``"host:pid"``) is what :meth:`leader` shows as the holder's
    ``purpose``. ``on_elected(election)`` and ``on_lost(election)`` are called once per
    term; ``on_lost`` runs on the watchdog's thread (or task), so keep it short.
    """

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        connection: str | None = None,
        identity: str | None = None,
        on_elected: Callback | None = None,
        on_lost: Callback | None = None,
        metrics_name: str | None = None,
    ) -> None:
        self.name = validate_name(name)
        self.metrics_name = events.validate_metrics_name(metrics_name)
        for label, callback in (("on_elected", on_elected), ("on_lost", on_lost)):
            if callback is not None and not callable(callback):
                raise ValueError(f"{label} must be callable, not {callback!r}")
        if identity is not None and (not isinstance(identity, str) or not identity):
            raise ValueError(f"identity must be a non-empty str, not {identity!r}")
        self.ttl = ttl
        self.connection = connection
        self._identity = identity
        self.on_elected = on_elected
        self.on_lost = on_lost
        self._lock: Lock | None = None  # the latest term's lease
        self._told: Lock | None = None  # the term on_lost was called for
        self._fence: int | None = None
        self._mutex = threading.Lock()
        # Validate ttl and connection now, not at the first campaign.
        self._new_lock(None)

    @property
    def identity(self) -> str:
        """Who this candidate is: the ``identity`` given, else ``"host:pid"``."""
        return self._identity or f"{hostname()}:{os.getpid()}"

    @property
    def is_leader(self) -> bool:
        """True while this process leads: False once the lease is lost or resigned."""
        lock = self._lock
        return lock is not None and lock.token is not None and not lock.lost

    @property
    def fence(self) -> int | None:
        """The term of this process's latest leadership (strictly grows per leader)."""
        return self._fence

    def _new_lock(self, timeout: float | None) -> Lock:
        return LeaderLease(
            self.name,
            ttl=self.ttl,
            timeout=timeout,
            watchdog=True,
            fencing=True,
            connection=self.connection,
            purpose=self.identity,
            on_lost=self._lost,
            reentrant=False,  # two candidates in one thread are two candidates
            metrics_name=self.metrics_name,
        )

    def _lost(self, lock: Lock) -> None:
        # Called by the lock (the watchdog's thread or task), or by _end_term: once a term.
        with self._mutex:
            if lock is not self._lock or self._told is lock:
                return  # an earlier term, or already told
            self._told = lock
        logger.warning("Leadership of %r lost (term %s)", self.name, lock.fence)
        self._call_back(self.on_lost, "on_lost")

    def _ending(self) -> Lock | None:
        """The term to end, if its lease is still held or was lost; reports a loss first."""
        lock = self._lock
        if lock is None or lock.token is None:
            return None
        if lock.lost:
            # Noticed here before the watchdog said so (is_leader turned False first):
            # the term was lost, not resigned, and on_lost is still owed.
            self._lost(lock)
        return lock

    def _won(self, lock: Lock) -> bool:
        with self._mutex:
            self._lock = lock
            self._fence = lock.fence
        logger.info("Elected leader of %r (term %s)", self.name, lock.fence)
        self._call_back(self.on_elected, "on_elected")
        return True

    def _call_back(self, callback: Callable[[Election], Any] | None, what: str) -> None:
        """Run a user callback; log its error (same rule as the lock signals: the caller
        must still learn that it leads, or that it lost)."""
        if callback is None:
            return
        try:
            callback(self)
        except Exception:
            logger.exception("%s callback failed for election %r", what, self.name)

    def _check_idle(self) -> None:
        if self.is_leader:
            raise RuntimeError(f"Already leading {self.name!r}: resign() first")

    # -- the lifecycle, once (run by drivers.run for sync callers, drivers.arun for async) --
    def _campaign(self, timeout: float | None, loop: Any) -> Generator[Step, Any, bool]:
        self._check_idle()
        yield from self._resign()  # a lost term's lease, if it was never let go
        lock = self._new_lock(timeout)
        if not (yield from protocol.acquire(lock, None, None, loop=loop)):
            return False
        return self._won(lock)

    def _resign(self) -> Generator[Step, Any, None]:
        lock = self._ending()
        if lock is None:
            return
        try:
            yield from protocol.release(lock)
        except LockNotOwned:
            self._lost(lock)  # lost between the check and the release

    # -- sync ----------------------------------------------------------------------
    def campaign(self, timeout: float | None = None) -> bool:
        """Block until this process leads (True) or ``timeout`` seconds ran out (False).

        ``timeout=None`` waits as long as it takes.
        """
        return drivers.run(self._campaign(timeout, None))

    def resign(self) -> None:
        """Stop leading (release the lease at once); nothing to do when not leading."""
        drivers.run(self._resign())

    def leader(self) -> LockInfo | None:
        """Who leads now, as Redis says (``purpose`` is the leader's identity), or None."""
        return lock_info(self.name, connection=self.connection)

    def __enter__(self) -> Election:
        self.campaign()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.resign()

    # -- async ---------------------------------------------------------------------
    async def acampaign(self, timeout: float | None = None) -> bool:
        """Async twin of :meth:`campaign` (the lease is renewed on this event loop)."""
        return await drivers.arun(self._campaign(timeout, asyncio.get_running_loop()))

    async def aresign(self) -> None:
        """Async twin of :meth:`resign`."""
        await drivers.arun(self._resign())

    async def aleader(self) -> LockInfo | None:
        """Async twin of :meth:`leader`."""
        return await alock_info(self.name, connection=self.connection)

    async def __aenter__(self) -> Election:
        await self.acampaign()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aresign()

    def __repr__(self) -> str:
        state = f"leader, term {self._fence}" if self.is_leader else "not leading"
        return f"<Election {self.name!r} {self.identity} ({state})>"
