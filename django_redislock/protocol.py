"""The lock lifecycle, written once: each call is a generator of steps.

A step is :class:`Send` (run one of the lock's operation hooks, ``_do_acquire`` and the
like, which send its kind's operation over its transport) or :class:`Wait` (sleep until
woken or a deadline). The generator receives each step's reply, or has the step's error
thrown in, and returns the call's result. :mod:`django_redislock.drivers` runs it for sync
callers (:func:`~.drivers.run`) and async ones (:func:`~.drivers.arun`), so both walk the
same steps; the drivers own the cancellation rules.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator
from typing import Any, Protocol

from redis.exceptions import RedisError

from . import events, reentry, registry
from .attempts import Attempts
from .clock import now as clock
from .exceptions import LockLost, LockNotOwned, RedisLockError
from .keys import ttl_milliseconds
from .kinds.mutex import Granted
from .steps import Send, Step, Wait
from .transactions import defer_release_to_commit
from .transports.base import UNREACHABLE, is_wrong_type
from .transports.replicated import NotReplicated

acquire_logger = logging.getLogger("django_redislock.acquire")
release_logger = logging.getLogger("django_redislock.release")


class LockLike(Protocol):
    """What the lifecycle needs of a lock (``BaseLock`` has it): its state, its rules for
    who owns it and its errors. The operations themselves go through its ``_do_*`` hooks."""

    name: str
    token: str | None
    ttl: float
    _ttl_ms: int
    #: The kind's operations (``ops.kind``: the kind's name).
    ops: Any
    valid_until: float | None
    reentrant: bool
    #: The owner's hold it takes part in (``reentry``), or None.
    _hold: Any

    @property
    def lost(self) -> bool: ...
    def _resolve_wait(self, blocking: bool | None, timeout: float | None) -> float | None: ...
    def _check_not_held(self) -> None: ...
    def _owned_token(self, action: str) -> str: ...
    def _took(
        self,
        token: str,
        fence: int,
        started: float,
        *,
        in_loop: bool = False,
        waited: float = 0.0,
        attempts: int | None = None,
    ) -> None: ...
    def _emit(self, type_: str, **fields: Any) -> None: ...
    def _end_hold(self, type_: str, reason: str | None = None) -> None: ...
    def _forget(self) -> None: ...
    def _after_release(self, released: bool) -> None: ...
    def _release_after_transaction(self) -> None: ...
    def _validity_of(self, seconds: float) -> float: ...
    def _backend_error(self, exc: BaseException) -> RedisLockError: ...
    def _not_owned(self, action: str) -> LockNotOwned: ...
    def _replicas_missing(self, short: NotReplicated) -> RedisLockError: ...
    def _not_replicated(self, short: NotReplicated) -> RedisLockError: ...


def acquire(
    lock: LockLike, blocking: bool | None, timeout: float | None, *, loop: Any = None
) -> Generator[Step, Any, bool]:
    """``acquire()``: try, wait (woken by a release or by backoff), try again, until the
    lock is ours (True) or the wait ran out (False). ``loop``: the caller's event loop
    (async callers), where its waiter is woken and its watchdog runs.

    Clean-up: an attempt whose outcome is unknown (unreachable, or cancelled mid-command)
    is undone by token; a waiter that leaves drops its claim on the next turn.
    """
    wait_for = lock._resolve_wait(blocking, timeout)
    if lock.reentrant and reentry.enter(lock, in_loop=loop is not None):
        return True  # its owner holds it already: counted, no round trip
    lock._check_not_held()
    attempts = Attempts(lock, wait_for, loop=loop)
    token = attempts.token
    try:
        while True:
            attempts.before_attempt()
            started = clock()
            try:
                attempt = yield Send(lock, "_do_acquire", (token, attempts.waited_ms))
            except asyncio.CancelledError:
                # The SET (or our claim on the next turn) may have landed: delete what
                # holds our token before the cancel completes.
                yield Send(lock, "_do_cleanup", (token,))
                if attempts.waited_ms:
                    yield Send(lock, "_do_unclaim", (token,))
                attempts.report(events.CANCELLED)
                raise
            except NotReplicated as short:  # granted, but too few replicas saw it: undone
                yield from _cleanup_quietly(lock, token)
                error = lock._replicas_missing(short)
                attempts.report(events.FAILED, reason=str(error))
                raise error from None
            except UNREACHABLE as exc:
                if not never_sent(exc):
                    yield from _cleanup_quietly(lock, token)
                if attempts.waited_ms:
                    yield from _unclaim_quietly(lock, token)
                attempts.report(events.FAILED, reason=str(exc))
                raise lock._backend_error(exc) from exc
            except RedisError as exc:
                raise (yield from refused(lock, exc)) from exc
            if isinstance(attempt, Granted):
                return attempts.won(attempt.fence, started, attempt.token)
            pause = attempts.next_pause(attempt, started)
            if pause is None:
                if attempts.waited_ms:
                    yield from _unclaim_quietly(lock, token)
                attempts.gave_up(attempt)
                return False
            attempts.refused(attempt)
            try:
                waiter = attempts.waiter
                yield Wait(pause, None if waiter is None else waiter.wakeup)
            except asyncio.CancelledError:
                if attempts.waited_ms:
                    # Before the cancel completes: a release must not hand the lock to a
                    # waiter that is gone.
                    yield Send(lock, "_do_unclaim", (token,))
                attempts.report(events.CANCELLED)
                raise
            handed = attempts.live_hand_off()
            if handed is not None:
                return attempts.won(*handed)
    finally:
        attempts.close()


def refused(lock: LockLike, exc: BaseException) -> Generator[Step, Any, RedisLockError]:
    """The error to raise for a Redis error: ``LockConfigurationError`` naming both kinds
    when the name is held by another kind of lock (``WRONGTYPE``), else the lock's own."""
    if not is_wrong_type(exc):
        return lock._backend_error(exc)
    try:
        found = yield Send(lock, "_do_key_type", (exc,))
    except RedisError:
        found = None
    return registry.conflict(lock.name, lock.ops.kind, found)


def never_sent(exc: BaseException) -> bool:
    """True when ``exc`` is redis-py's error for a connection it could not open (``Error 111
    connecting to host:port``, ``Timeout connecting to server``): the command never left
    this process, so there is nothing to clean up."""
    text = str(exc)
    return " connecting to " in text or text.startswith("Timeout connecting")


def _cleanup_quietly(lock: LockLike, token: str) -> Generator[Step, Any, None]:
    """Undo an attempt whose outcome is unknown; a failure is logged (the key expires)."""
    try:
        yield Send(lock, "_do_cleanup", (token,))
    except Exception as exc:
        acquire_logger.warning(
            "Could not clean up after a failed acquire of %r (it expires in %.3fs): %s",
            lock.name,
            lock.ttl,
            exc,
        )


def _unclaim_quietly(lock: LockLike, token: str) -> Generator[Step, Any, None]:
    """Drop this waiter's claim on the next turn; a failure is logged (the claim expires)."""
    try:
        yield Send(lock, "_do_unclaim", (token,))
    except Exception as exc:
        acquire_logger.info("Could not drop the claim on %r: %s", lock.name, exc)


def release(lock: LockLike) -> Generator[Step, Any, None]:
    """``release()``: compare-and-delete by this object's token; ``LockNotOwned`` if gone."""
    token = lock._owned_token("release")
    if lock._hold is not None:
        carrier = reentry.leave(lock)
        if carrier is None:
            return  # its owner is still inside: no round trip
        lock, token = carrier, carrier.token  # the count is zero: the first entry releases
    lock._forget()
    try:
        released = yield Send(lock, "_do_release", (token,), shielded=True, repeatable=True)
    except RedisError as exc:
        # Off the watchdog already: whoever held it here holds it no more (it expires).
        lock._end_hold(events.LOST, f"its release failed ({exc}); it expires by its TTL")
        raise (yield from refused(lock, exc)) from exc
    lock._after_release(released)


def extend(lock: LockLike, ttl: float | None) -> Generator[Step, Any, None]:
    """``extend()``: reset the TTL to ``ttl`` (default: the lock's); ``LockNotOwned`` if gone."""
    ttl_ms = lock._ttl_ms if ttl is None else ttl_milliseconds(ttl)
    token = lock._owned_token("extend")
    started = clock()
    try:
        extended = yield Send(lock, "_do_extend", (token, ttl_ms))
    except NotReplicated as short:  # extended on the primary only: the validity stays
        raise lock._not_replicated(short) from None
    except RedisError as exc:
        raise (yield from refused(lock, exc)) from exc
    if not extended:
        raise lock._not_owned("extend")
    lock.valid_until = started + lock._validity_of(ttl_ms / 1000)


def adopt(lock: LockLike, token: str, *, in_loop: bool) -> Generator[Step, Any, bool]:
    """``adopt()``: take over the lock held under ``token``; False if it no longer holds it."""
    if not isinstance(token, str) or not token:
        raise ValueError(f"token must be a non-empty str, not {token!r}")
    lock._check_not_held()
    started = clock()
    try:
        extended = yield Send(lock, "_do_extend", (token, lock._ttl_ms))
        fence = (yield Send(lock, "_do_holder_fence", (token,))) if extended else None
    except NotReplicated as short:
        raise lock._not_replicated(short) from None
    except RedisError as exc:
        raise (yield from refused(lock, exc)) from exc
    if fence is None:
        return False
    lock._took(token, fence, started, in_loop=in_loop)
    return True


def exit_with(
    lock: Any,
    exc_type: type[BaseException] | None,
    *,
    defer_to_commit: bool,
    releasing: Callable[[Any], Generator[Step, Any, None]] | None = None,
) -> Generator[Step, Any, None]:
    """The end of ``with`` / ``async with``: release (after the open database transaction,
    with ``defer_to_commit``); ``LockLost`` if the lock was lost while held, unless an
    error is already propagating (then it is logged, as is a failed release).

    ``lock``: a ``LockLike``, or anything with its ``name``, ``token``, ``lost`` and
    ``_release_after_transaction`` whose ``releasing(lock)`` steps release it (MultiLock)."""
    releasing = release if releasing is None else releasing
    lost = lock.lost
    if lock.token is None and not lost:
        # Released inside the block (only release() clears the token): as with redis-py's
        # lock, pottery's and threading.Lock, leaving the block then is an error.
        message = (
            f"Lock {lock.name!r} was released inside its with block, so leaving the block "
            "had nothing to release; use either `with` or acquire()/release()."
        )
        if exc_type is None:
            raise LockNotOwned(message, lock_name=lock.name)
        release_logger.warning(
            "%s (not raised over the propagating %s)", message, exc_type.__name__
        )
        return
    if (
        defer_to_commit
        and not lost
        and lock.token is not None
        and defer_release_to_commit(lock._release_after_transaction)
    ):
        return  # released when the open transaction commits or rolls back
    try:
        if lock.token is not None:
            yield from releasing(lock)
    except LockNotOwned:
        lost = True
    except RedisLockError:
        if exc_type is None:
            raise
        release_logger.exception("Releasing %r failed while an error propagated", lock.name)
    if not lost:
        return
    if exc_type is None:
        raise LockLost(
            f"Lock {lock.name!r} was lost while held (expired or taken over).",
            lock_name=lock.name,
        )
    release_logger.error(
        "Lock %r was lost while held; not raising LockLost over the propagating %s",
        lock.name,
        exc_type.__name__,
    )


__all__ = ["Send", "Step", "Wait", "acquire", "adopt", "exit_with", "extend", "release"]
