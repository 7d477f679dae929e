"""``BaseLock``: everything a lock does except its kind and its transport.

A lock class sets ``ops`` (its kind's operations on its keys) and ``transport``
(how they reach Redis); the small ``_do_*`` / ``_ado_*`` hooks send the one to
the other (a lock class may override them). This class validates, keeps the
object's state, runs the acquire loop (with :class:`~django_redislock.attempts.Attempts`),
the watchdog, signals, release after commit and ``with`` / ``async with``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import secrets
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from . import drivers, events, protocol, reentry, replication, watchdog
from .clock import now
from .conf import get_config
from .exceptions import (
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    RedisLockError,
)
from .keys import LockKeys, ttl_milliseconds, validate_name, validate_prefix, validate_seconds
from .kinds.holders import Holders, HolderState, key_type
from .kinds.interface import KindOperations
from .kinds.mutex import Attempt
from .transports.base import UNREACHABLE, Transport, is_unreachable
from .transports.replicated import NotReplicated

acquire_logger = logging.getLogger("django_redislock.acquire")
release_logger = logging.getLogger("django_redislock.release")

#: The clock every lock uses for timeouts and validity (:mod:`django_redislock.clock`).
clock: Callable[[], float] = now


def new_token() -> str:
    """An unguessable token (128 bits from :mod:`secrets`)."""
    return secrets.token_urlsafe(16)


class BaseLock:
    """Everything a lock does except talking to Redis (see the ``_do_*`` hooks)."""

    #: The Django signal ``sender``.
    name: str
    key: str
    token: str | None
    fence: int | None
    #: Re-entries by the same owner count instead of waiting (``Lock(reentrant=True)``).
    reentrant: bool = False
    #: The owner's hold this object takes part in, and its own entries (``reentry``).
    _hold: Any = None
    _depth: int = 0
    #: The ``kind`` its events report when not its kind's name (``"redlock"``, ...).
    _event_kind: str | None = None
    #: What its holder description says it is, beyond its kind (an election's lease).
    _holder_role: str = ""
    #: True from an acquire until its hold's end was reported (released or lost).
    _hold_open: bool = False
    _hold_token: str | None = None

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        blocking: bool = True,
        watchdog: bool | None = None,
        fencing: bool = True,
        purpose: str | None = None,
        on_lost: Callable[[Any], Any] | None = None,
        max_hold: float | None = None,
        metrics_name: str | None = None,
    ) -> None:
        config = get_config()
        self.name = validate_name(name)
        self.keys = LockKeys.build(validate_prefix(config["KEY_PREFIX"]), self.name)
        self.key = self.keys.key
        self._ttl_ms = ttl_milliseconds(config["TTL"] if ttl is None else ttl)
        self.ttl = self._ttl_ms / 1000
        self.timeout = _validate_timeout(timeout)
        if not isinstance(blocking, bool):
            raise ValueError(f"blocking must be True or False, not {blocking!r}")
        self.blocking = blocking
        self.watchdog = bool(config["WATCHDOG"] if watchdog is None else watchdog)
        self.fencing = bool(fencing)
        if purpose is not None and not isinstance(purpose, str):
            raise ValueError(f"purpose must be a str, not {purpose!r}")
        self.purpose = purpose
        if on_lost is not None and not callable(on_lost):
            raise ValueError(f"on_lost must be callable, not {on_lost!r}")
        self.on_lost = on_lost
        self.max_hold = (
            None if max_hold is None else validate_seconds(max_hold, "max_hold", allow_zero=False)
        )
        #: The family given for metrics (``None``: the name up to its first ``:``).
        self.metrics_name = events.validate_metrics_name(metrics_name)
        self._family: str | None = None
        self.token = None
        self.fence = None
        self._lost = False
        self._owner_pid: int | None = None
        #: clock() (monotonic) before the acquire that succeeded was sent.
        self.acquired_monotonic: float | None = None
        self._acquired_wall: float | None = None  # time.time() when it was taken
        #: clock() time until which this holder may believe it holds the lock.
        self.valid_until: float | None = None
        #: The holder's remaining TTL (seconds) seen by the last failed attempt.
        self.last_holder_ttl: float | None = None
        #: Who held the lock when the last acquire gave up (from the refusing reply).
        self.busy_holder: HolderState | None = None
        #: This lock's operations (its kind's scripts on its keys), set by the subclass.
        self.ops: KindOperations
        #: How they reach Redis, set by the subclass.
        self.transport: Transport

    @property
    def lost(self) -> bool:
        """True once this holder can no longer trust that it holds the lock.

        Set by the watchdog when a renewal found the token gone (or Redis stayed
        unreachable until the TTL ran out), and also true as soon as the local
        validity (acquire time + TTL, or the last extend/renewal + TTL) has
        passed, even if no renewal could run (a starved process).
        """
        hold = self._hold
        if hold is not None and hold.carrier is not self:
            return bool(hold.carrier.lost)  # a re-entry: the first entry's lock decides
        if self._lost:
            return True
        valid_until = self.valid_until
        return self.token is not None and valid_until is not None and clock() >= valid_until

    @property
    def family(self) -> str:
        """The bounded name metrics label this lock with (:func:`.events.family_of`);
        worked out on first use, so a process without metrics never counts families."""
        family = self._family
        if family is None:
            family = self._family = events.family_of(self.name, self.metrics_name)
        return family

    @property
    def event_kind(self) -> str:
        """The ``kind`` of this lock's events and metrics: its kind's name (``"lock"``,
        ``"semaphore"``, ``"read"``, ``"write"``), or what its class says (``"redlock"``,
        an election's ``"election"``)."""
        kind: str = self._event_kind or self.ops.kind
        return kind

    @property
    def acquired_at(self) -> dt.datetime | None:
        """When this object took the lock it holds (aware, UTC), like ``LockInfo.acquired_at``.

        ``None`` when not held. Durations are measured with ``acquired_monotonic``.
        """
        if self.token is None or self._acquired_wall is None:
            return None
        return dt.datetime.fromtimestamp(self._acquired_wall, dt.timezone.utc)

    # -- hooks for subclasses ---------------------------------------------
    def _new_token(self) -> str:
        """The token of the next acquire (``compat.CacheLock`` lets the caller choose it)."""
        return new_token()

    # The kind's operations over the transport. Redlock overrides the ones its own
    # scatter still does (until the quorum transport replaces it).
    def _do_acquire(self, token: str, waited_ms: int) -> Attempt:
        """Try once (``waited_ms``: how long this acquire has waited): Granted or Busy."""
        attempt: Attempt = self.transport.call(self.ops.acquire(token, waited_ms))
        return attempt

    async def _ado_acquire(self, token: str, waited_ms: int) -> Attempt:
        attempt: Attempt = await self.transport.acall(self.ops.acquire(token, waited_ms))
        return attempt

    def _replicas_missing(self, short: NotReplicated) -> RedisLockError:
        """Granted, but too few replicas saw it: undone, ReplicasNotAcked."""
        return replication.not_acked(self.name, short.acked, short.wanted, short.ms)

    def _do_release(self, token: str) -> bool:
        return bool(self.transport.call(self.ops.release(token)))

    async def _ado_release(self, token: str) -> bool:
        return bool(await self.transport.acall(self.ops.release(token)))

    def _do_extend(self, token: str, ttl_ms: int) -> bool:
        return bool(self.transport.call(self.ops.extend(token, ttl_ms)))

    async def _ado_extend(self, token: str, ttl_ms: int) -> bool:
        return bool(await self.transport.acall(self.ops.extend(token, ttl_ms)))

    def _do_holder_fence(self, token: str) -> int | None:
        """The fence of the holder with ``token`` (``None`` if it does not hold the lock)."""
        return _fence_of(self.transport.call(self.ops.read_holders()), token)

    async def _ado_holder_fence(self, token: str) -> int | None:
        return _fence_of(await self.transport.acall(self.ops.read_holders()), token)

    def _do_key_type(self, exc: BaseException) -> str:
        """The Redis type of this lock's main key (after ``exc``, a ``WRONGTYPE``)."""
        found: str = self.transport.call(key_type(self.key))
        return found

    async def _ado_key_type(self, exc: BaseException) -> str:
        found: str = await self.transport.acall(key_type(self.key))
        return found

    def _not_replicated(self, short: NotReplicated) -> RedisLockError:
        """Extended on the primary only: the validity does not move (ExtendNotReplicated)."""
        return replication.extend_not_acked(self.name, short.acked, short.wanted, short.ms)

    def _do_cleanup(self, token: str) -> None:
        """Best-effort compare-and-delete after an acquire whose outcome is unknown."""
        self._do_release(token)

    async def _ado_cleanup(self, token: str) -> None:
        await self._ado_release(token)

    def _do_unclaim(self, token: str) -> None:
        """Drop this waiter's claim on the next turn (or release what was handed to it)."""
        self.transport.call(self.ops.unclaim(token))

    async def _ado_unclaim(self, token: str) -> None:
        await self.transport.acall(self.ops.unclaim(token))

    def _backend_error(self, exc: BaseException) -> RedisLockError:
        raise NotImplementedError

    def _may_own(self) -> bool:
        """Holds a token taken in this process (a forked child owns nothing)."""
        return self.token is not None and self._owner_pid == os.getpid()

    def _wake_alias(self) -> str | None:
        """The alias whose pub/sub wakes waiters, or None to use backoff only."""
        return None

    def _validity_of(self, seconds: float) -> float:
        """Seconds a grant or renewal of ``seconds`` may be trusted (Redlock: less the drift)."""
        return seconds

    @property
    def validity(self) -> float:
        """Seconds the holder may trust the lock from just before the call that took or
        renewed it was sent (the TTL; less the clock drift for Redlock)."""
        return self._validity_of(self.ttl)

    # -- state --------------------------------------------------------------
    def _check_not_held(self) -> None:
        if self.token is not None and self._owner_pid == os.getpid():
            raise RedisLockError(
                f"Lock {self.name!r} is already acquired by this object; release it first, "
                "or use one Lock object per holder.",
                lock_name=self.name,
            )

    def _took(
        self,
        token: str,
        fence: int,
        started: float,
        *,
        in_loop: bool = False,
        waited: float = 0.0,
        attempts: int | None = None,
    ) -> None:
        self.token = token
        self.fence = fence if self.fencing else None
        self._lost = False
        self._owner_pid = os.getpid()
        self.acquired_monotonic = started
        self._acquired_wall = time.time()
        self.valid_until = started + self.validity
        self.last_holder_ttl = None
        if self.reentrant:
            reentry.took(self, in_loop=in_loop)
        if self.watchdog:
            watchdog.watch(self, in_loop=in_loop)
        acquire_logger.debug("acquired %r fence=%s", self.name, self.fence)
        self._hold_open = True
        self._hold_token = token  # its release's event names it (the lock forgets it first)
        self._emit(events.ACQUIRED, fence=self.fence, waited=waited, attempts=attempts)

    def _emit(self, type_: str, **fields: Any) -> None:
        """Report what happened to this lock to the event stream (:mod:`.events`)."""
        if not events.wanted(type_, type(self)):
            return
        token = fields.pop("token", None) or self.token
        events.emit(
            events.LockEvent(
                type_,
                self.event_kind,
                self.name,
                token_prefix=None if token is None else token[:6],
                lock=self,
                **fields,
            )
        )

    def _end_hold(self, type_: str, reason: str | None = None) -> None:
        """The hold taken by the last acquire ended (``released`` or ``lost``): reported
        once per hold, whichever path sees it first (release, watchdog, ``with``)."""
        if not self._hold_open:
            return
        self._hold_open = False
        started = self.acquired_monotonic
        self._emit(
            type_,
            token=self._hold_token,
            fence=self.fence,
            held=None if started is None else clock() - started,
            reason=reason,
        )

    def _forget(self) -> None:
        if self.watchdog:
            watchdog.unwatch(self)
        self.token = None
        self._owner_pid = None
        self.valid_until = None
        self._hold, self._depth = None, 0

    def _owned_token(self, action: str) -> str:
        """The token to release/extend with, or LockNotOwned."""
        if self.token is None:
            raise LockNotOwned(
                f"Cannot {action} lock {self.name!r}: this object does not hold it.",
                lock_name=self.name,
            )
        if self._owner_pid != os.getpid():
            raise LockNotOwned(
                f"Cannot {action} lock {self.name!r}: it is held by process {self._owner_pid}, "
                f"not by this forked process {os.getpid()}.",
                lock_name=self.name,
            )
        return self.token

    def _not_owned(self, action: str) -> LockNotOwned:
        return LockNotOwned(
            f"Cannot {action} lock {self.name!r}: it expired or another holder took it.",
            lock_name=self.name,
        )

    def _resolve_wait(self, blocking: bool | None, timeout: float | None) -> float | None:
        blocking = self.blocking if blocking is None else blocking
        if not isinstance(blocking, bool):
            raise ValueError(f"blocking must be True or False, not {blocking!r}")
        if not blocking:
            return 0.0
        return self._default_wait() if timeout is None else _validate_timeout(timeout)

    def _default_wait(self) -> float | None:
        """How long acquire() waits when not told (``timeout``; CacheLock: ``blocking_timeout``)."""
        return self.timeout

    # -- sync API -------------------------------------------------------------
    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Acquire the lock; True on success, False when the timeout ran out.

        ``blocking=False`` tries once. ``timeout`` (seconds) bounds the wait;
        ``None`` waits forever. Raises :class:`LockBackendUnavailable` when Redis
        cannot be reached.
        """
        return drivers.run(protocol.acquire(self, blocking, timeout))

    def release(self) -> None:
        """Release the lock; :class:`LockNotOwned` if this object no longer holds it."""
        drivers.run(protocol.release(self))

    def _after_release(self, released: bool) -> None:
        if not released:
            self._end_hold(events.LOST, "expired or taken over before its release")
            raise self._not_owned("release")
        release_logger.debug("released %r", self.name)
        self._end_hold(events.RELEASED)

    def extend(self, ttl: float | None = None) -> None:
        """Reset the remaining TTL to ``ttl`` seconds (default: the lock's ttl)."""
        drivers.run(protocol.extend(self, ttl))

    def adopt(self, token: str) -> bool:
        """Take over the lock held under ``token``: a lock another process handed over.

        The process that acquired it passes its ``token`` along (a Celery task's message,
        say); this object then owns the lock as if it had acquired it: its TTL restarts at
        this object's ``ttl``, its watchdog (if on) renews it, ``fence`` is the holder's
        fence, ``release()`` releases it. False if that token no longer holds the lock
        (expired, released, or taken over since). The handing side must stop using the
        token. The holder details shown by the admin stay those of the first holder.
        """
        return drivers.run(protocol.adopt(self, token, in_loop=False))

    async def aadopt(self, token: str) -> bool:
        """Async twin of :meth:`adopt` (the watchdog, if on, renews on this event loop)."""
        return await drivers.arun(protocol.adopt(self, token, in_loop=True))

    def check(self) -> None:
        """Raise :class:`LockLost` if this lock was lost, :class:`LockNotOwned` if never held.

        Cheap (no network): for long jobs to call between steps.
        """
        if self.lost:
            raise LockLost(f"Lock {self.name!r} was lost.", lock_name=self.name)
        self._owned_token("check")

    def __enter__(self) -> BaseLock:
        if not self.acquire():
            raise self._busy_error()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        drivers.run(protocol.exit_with(self, exc_type, defer_to_commit=True))

    def _release_after_transaction(self) -> None:
        """Run by :func:`defer_release_to_commit` once the transaction ended."""
        if self.token is None:
            return
        try:
            self.release()
        except LockNotOwned:
            watchdog.mark_lost(self, "expired or taken over before the transaction ended")
        except RedisLockError:
            release_logger.exception("Releasing %r after the transaction failed", self.name)

    def _busy_error(self) -> LockNotAcquired:
        wait = self._default_wait()
        waited = "" if wait is None else f" within {wait:g}s"
        left = self.last_holder_ttl
        held = "" if left is None else f"; the holder's lock expires in {left:.3f}s"
        return LockNotAcquired(
            f"Could not acquire lock {self.name!r}{waited}: it is held by someone else{held}.",
            lock_name=self.name,
            remaining=left,
        )

    # -- async API ------------------------------------------------------------
    async def aacquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Async twin of :meth:`acquire`. Cancelling it leaves no key behind."""
        loop = asyncio.get_running_loop()
        return await drivers.arun(protocol.acquire(self, blocking, timeout, loop=loop))

    async def arelease(self) -> None:
        """Async twin of :meth:`release`. Cancelling it still releases the lock."""
        await drivers.arun(protocol.release(self))

    async def aextend(self, ttl: float | None = None) -> None:
        """Async twin of :meth:`extend`."""
        await drivers.arun(protocol.extend(self, ttl))

    async def __aenter__(self) -> BaseLock:
        if not await self.aacquire():
            raise self._busy_error()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # Unlike __exit__, no deferral to the end of a database transaction: Django's
        # transactions are sync-only (atomic() refuses to run in an event loop), so no
        # transaction of this thread can be open around an ``async with``.
        await drivers.arun(protocol.exit_with(self, exc_type, defer_to_commit=False))

    def __repr__(self) -> str:
        state = "held" if self.token else "not held"
        return f"<{type(self).__name__} {self.name!r} {state}>"


def _fence_of(read: Holders | HolderState | None, token: str) -> int | None:
    """The fence of holder ``token`` in a holder read (a quorum reads the majority's one)."""
    states = read.states if isinstance(read, Holders) else () if read is None else (read,)
    return next((int(state.fence) for state in states if state.token == token), None)


def _validate_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    return validate_seconds(timeout, "timeout", allow_zero=True)


__all__ = ["UNREACHABLE", "BaseLock", "clock", "is_unreachable", "new_token"]
