"""Keeping watchdog locks alive while their holder lives.

ONE daemon thread per process renews every watchdog lock taken with
``acquire()``; ONE task per event loop renews those taken with ``aacquire()``.
Each lock is renewed at about ttl/3 with its kind's extend operation (compare
token, then extend: it never re-creates a lock that is gone), sent by the lock's
transport. Locks of one transport group (one connection) that fall due together
are renewed in one pipelined round trip.

A renewal that finds the token gone, or that cannot reach Redis before the
lock's local validity ran out, marks the lock lost: ``lock.lost`` turns True,
``lock_lost`` is sent and the lock's ``on_lost`` callback is called, once.
A release always wins: a lock released (or re-acquired) while its renewal was
in flight is simply dropped, never reported lost. A lock object that is
garbage-collected while held is released here, by its token. The thread and
the tasks end when they have nothing left to renew.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import weakref
from collections.abc import Callable, Generator, Hashable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from . import clock, drivers, events
from .steps import Send, Step, Wait
from .waiting import LoopWake, ThreadWake

if TYPE_CHECKING:
    from .transports.base import Transport

logger = logging.getLogger("django_redislock.watchdog")

#: Renew at this fraction of the TTL.
RENEW_FRACTION = 1 / 3
#: A lock due within this fraction of its TTL is renewed with the ones due now:
#: renewing a little early lets locks of one connection share a round trip.
COALESCE_FRACTION = 1 / 10
#: After a failed renewal (server unreachable), retry this much sooner.
RETRY_FRACTION = 1 / 10
#: The thread / task exits after this long with nothing to renew.
IDLE_EXIT_SECONDS = 1.0


class Renewable(Protocol):
    """Exactly what the watchdog needs from a lock (``BaseLock`` implements it).

    Its state, its ``transport`` (how its operations reach Redis) and its ``ops``
    (its kind's operations): a renewal is ``transport.call_many([ops.extend(token)])``
    (locks of one ``transport.renew_group`` share the batch), and a lock collected while
    held is released with ``transport.call(ops.release(token))``. Nothing else of a
    lock is touched here, so a new kind or transport needs no change to the watchdog.
    """

    name: str
    token: str | None
    ttl: float
    max_hold: float | None
    on_lost: Callable[[Any], Any] | None
    #: clock() when the lock was taken (``max_hold`` counts from here).
    acquired_monotonic: float | None
    #: clock() time until which the holder may trust the lock; moved on by each renewal.
    valid_until: float | None
    #: Set once, by :func:`mark_lost`.
    _lost: bool
    transport: Transport

    def _emit(self, type_: str, **fields: Any) -> None:
        """Report a renewal to the event stream."""

    def _end_hold(self, type_: str, reason: str | None = None) -> None:
        """Report that the hold ended (here: lost), once."""

    @property
    def ops(self) -> RenewOps:
        """The lock's operations (``extend`` and ``release`` are sent here)."""

    @property
    def validity(self) -> float:
        """Seconds a renewal may be trusted for, from just before it was sent."""


class RenewOps(Protocol):
    """The two operations of a kind the watchdog sends (by the lock's own TTL)."""

    def extend(self, token: str) -> Any:
        """Renew ``token``'s hold: true when renewed, false when it is gone."""

    def release(self, token: str) -> Any:
        """Release ``token``'s hold."""


class _Entry:
    """One watched lock: a weak reference plus what we need if it is collected."""

    __slots__ = ("due", "release", "token", "weak")

    def __init__(self, lock: Renewable, token: str, due: float) -> None:
        self.token = token
        self.due = due
        # What releasing it needs without the object (used if it is collected).
        self.release: tuple[Transport, Any] = (lock.transport, lock.ops.release(token))
        self.weak = weakref.ref(lock)


def mark_lost(lock: Renewable, reason: str) -> None:
    """Mark ``lock`` lost and tell everyone who listens, once."""
    if lock._lost:
        return
    lock._lost = True
    logger.warning("Lock %r lost: %s", lock.name, reason)
    lock._end_hold(events.LOST, reason)
    if lock.on_lost is not None:
        try:
            lock.on_lost(lock)
        except Exception:
            logger.exception("on_lost callback failed for %r", lock.name)


class _Schedule:
    """Which watched locks are due when; shared by the thread and the tasks."""

    def __init__(self) -> None:
        self.entries: dict[int, _Entry] = {}

    def add(self, lock: Renewable) -> None:
        token = lock.token
        assert token is not None
        # ``due`` is the latest sensible renewal time; ``due - slack`` the earliest.
        # Counted from when the lock was granted (a hand-off may predate this call).
        since = lock.acquired_monotonic
        start = clock.now() if since is None else since
        self.entries[id(lock)] = _Entry(lock, token, start + lock.ttl * RENEW_FRACTION)

    def discard(self, lock: Renewable) -> None:
        entry = self.entries.get(id(lock))
        if entry is not None and entry.weak() is lock:
            del self.entries[id(lock)]

    def next_due(self) -> float | None:
        return min((e.due for e in self.entries.values()), default=None)

    @staticmethod
    def _slack(lock: Renewable) -> float:
        return lock.ttl * COALESCE_FRACTION

    def take_due(self, now: float) -> tuple[list[tuple[_Entry, Renewable]], list[_Entry]]:
        """(live due entries with their lock, entries whose lock was collected)."""
        due, orphans = [], []
        for key, entry in list(self.entries.items()):
            lock = entry.weak()
            if lock is None:
                orphans.append(entry)
                del self.entries[key]
            elif lock.token != entry.token or lock._lost:
                del self.entries[key]  # released, re-acquired or already lost
            elif entry.due - self._slack(lock) <= now:
                due.append((entry, lock))
        return due, orphans

    def settle(self, entry: _Entry, lock: Renewable, outcome: Any, started: float) -> None:
        """Apply one renewal's outcome: True, False (token gone) or an exception."""
        if lock.token != entry.token:
            self.entries.pop(id(lock), None)  # released meanwhile: the release won
            return
        now = clock.now()
        if outcome is True:
            lock.valid_until = started + lock.validity
            entry.due = started + lock.ttl * RENEW_FRACTION
            lock._emit(events.RENEWAL, result="renewed")
        elif outcome is False:
            self.entries.pop(id(lock), None)
            lock._emit(events.RENEWAL, result="lost")
            mark_lost(lock, "the lock expired or another holder took it")
        elif lock.valid_until is not None and now >= lock.valid_until:
            self.entries.pop(id(lock), None)
            lock._emit(events.RENEWAL, result="error", reason=str(outcome))
            mark_lost(lock, f"Redis unreachable until the TTL ran out ({outcome})")
        else:
            lock._emit(events.RENEWAL, result="error", reason=str(outcome))
            logger.info("Renewing %r failed, retrying: %s", lock.name, outcome)
            left = (lock.valid_until or now) - now
            entry.due = now + max(0.001, min(lock.ttl * RETRY_FRACTION, left / 2))

    def past_max_hold(self, entry: _Entry, lock: Renewable, now: float) -> bool:
        """True when the lock has been held longer than its ``max_hold``: stop renewing."""
        if lock.max_hold is None or lock.acquired_monotonic is None:
            return False
        if now - lock.acquired_monotonic < lock.max_hold:
            return False
        if lock.valid_until is not None and now < lock.valid_until:
            entry.due = lock.valid_until  # let it expire, then report it lost
            return True
        self.entries.pop(id(lock), None)
        mark_lost(lock, f"held longer than max_hold={lock.max_hold:g}s; let it expire")
        return True


class _Watchdog:
    """The state one renewal loop (:func:`_renewals`) works on: its schedule, the guard of
    the schedule and the wake-up a newly watched lock sets."""

    schedule: _Schedule
    guard: AbstractContextManager[Any]
    wakeup: ThreadWake | LoopWake

    def stopped(self) -> None:
        """The loop ends (idle): called under the guard, so a watch() starts a new one."""

    def unwatch(self, lock: Renewable) -> None:
        with self.guard:
            self.schedule.discard(lock)


class _ThreadWatchdog(_Watchdog):
    """The process's renewal thread for locks taken with ``acquire()``."""

    def __init__(self) -> None:
        self.schedule = _Schedule()
        self.guard = threading.Lock()
        self.wakeup = ThreadWake()
        self.thread: threading.Thread | None = None

    def watch(self, lock: Renewable) -> None:
        with self.guard:
            self.schedule.add(lock)
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(
                    target=self._run, name="redislock-watchdog", daemon=True
                )
                self.thread.start()
        self.wakeup.set()

    def stopped(self) -> None:
        self.thread = None

    def _run(self) -> None:
        drivers.run(_renewals(self))


class _LoopWatchdog(_Watchdog):
    """One renewal task per event loop for locks taken with ``aacquire()``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.schedule = _Schedule()
        self.guard = contextlib.nullcontext()  # one thread: the loop's
        self.wakeup = LoopWake(loop)
        self.task: asyncio.Task[None] | None = None

    def watch(self, lock: Renewable) -> None:
        self.schedule.add(lock)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run(), name="redislock-watchdog")
        self.wakeup.set()

    async def _run(self) -> None:
        await drivers.arun(_renewals(self))


class Renew(NamedTuple):
    """Release the collected locks' keys, renew the due locks; the outcomes come back."""

    due: list[tuple[_Entry, Renewable]]
    orphans: list[_Entry]


def _renewals(dog: _Watchdog) -> Generator[Step, Any, None]:
    """The watchdog's loop, written once (the thread runs it with ``drivers.run``, a loop's
    task with ``drivers.arun``). The schedule is touched under ``dog.guard`` only, and
    renewals run outside it; the wake-up is cleared before each decision, so a lock
    watched after it cuts the wait short. Ends after ``IDLE_EXIT_SECONDS`` idle."""
    schedule = dog.schedule
    idle_since: float | None = None
    while True:
        with dog.guard:
            dog.wakeup.clear()
            now = clock.now()
            due, orphans = schedule.take_due(now)
            due = [(e, lock) for e, lock in due if not schedule.past_max_hold(e, lock, now)]
            next_due = schedule.next_due()
            if not (due or orphans) and next_due is None:
                idle_since = idle_since or now
                if now - idle_since >= IDLE_EXIT_SECONDS:
                    dog.stopped()
                    return
        if due or orphans:
            idle_since = None
            started = clock.now()
            outcomes = yield Send(_Renewer, "renew", (Renew(due, orphans),))
            with dog.guard:
                for (entry, lock), outcome in zip(due, outcomes, strict=True):
                    schedule.settle(entry, lock, outcome, started)
        elif next_due is None:
            yield Wait(IDLE_EXIT_SECONDS, dog.wakeup)
        else:
            idle_since = None
            yield Wait(max(0.0, next_due - now), dog.wakeup)


def _groups(due: list[tuple[_Entry, Renewable]]) -> list[list[int]]:
    """Indexes of ``due`` per renewal batch: one per transport group, the rest alone."""
    groups: dict[Hashable, list[int]] = {}
    alone: list[list[int]] = []
    for index, (_, lock) in enumerate(due):
        group = lock.transport.renew_group
        if group is None:
            alone.append([index])
        else:
            groups.setdefault(group, []).append(index)
    return [*groups.values(), *alone]


def _batch(due: list[tuple[_Entry, Renewable]], indexes: list[int]) -> tuple[Transport, list[Any]]:
    transport = due[indexes[0]][1].transport
    return transport, [due[i][1].ops.extend(due[i][0].token) for i in indexes]


def _spread(
    due: list[tuple[_Entry, Renewable]], groups: list[list[int]], results: list[Any]
) -> list[Any]:
    """One outcome per due lock, from each batch's outcomes (or the error of the whole batch)."""
    outcomes: list[Any] = [None] * len(due)
    for indexes, result in zip(groups, results, strict=True):
        batch = result if isinstance(result, list) else [result] * len(indexes)
        for index, outcome in zip(indexes, batch, strict=True):
            outcomes[index] = outcome
    return outcomes


def _renew_batch(step: Renew) -> list[Any]:
    """Renew the due locks, a batch per transport group: True, False or an exception each."""
    _release_orphans(step.orphans)
    groups = _groups(step.due)
    return _spread(step.due, groups, [_call_many(*_batch(step.due, g)) for g in groups])


def _call_many(transport: Transport, ops: list[Any]) -> Any:
    try:
        return transport.call_many(ops)
    except Exception as exc:  # reported through settle()
        return exc


async def _arenew_batch(step: Renew) -> list[Any]:
    """Async :func:`_renew_batch`: the batches at once."""
    _release_orphans(step.orphans)
    groups = _groups(step.due)
    batches = [_batch(step.due, g) for g in groups]
    calls = [transport.acall_many(ops) for transport, ops in batches]
    results = await asyncio.gather(*calls, return_exceptions=True)
    return _spread(step.due, groups, list(results))


class _Renewer:
    """A renewal batch each way: ``renew`` for the thread, ``arenew`` for a loop's task."""

    renew = staticmethod(_renew_batch)
    arenew = staticmethod(_arenew_batch)


def _release_orphans(orphans: list[_Entry]) -> None:
    for entry in orphans:
        transport, op = entry.release
        try:
            transport.call(op)
        except Exception as exc:  # it expires by its TTL anyway
            logger.info("Could not release a garbage-collected lock: %s", exc)


_thread_watchdog = _ThreadWatchdog()
_loop_watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopWatchdog] = (
    weakref.WeakKeyDictionary()
)


def watch(lock: Renewable, *, in_loop: bool = False) -> None:
    """Start renewing ``lock`` (just acquired with ``watchdog=True``)."""
    if in_loop:
        loop = asyncio.get_running_loop()
        dog = _loop_watchdogs.get(loop)
        if dog is None:
            dog = _loop_watchdogs[loop] = _LoopWatchdog(loop)
        dog.watch(lock)
    else:
        _thread_watchdog.watch(lock)


def unwatch(lock: Renewable) -> None:
    """Stop renewing ``lock`` (it is being released)."""
    _thread_watchdog.unwatch(lock)
    for dog in list(_loop_watchdogs.values()):
        dog.unwatch(lock)


def running() -> bool:
    """True while the watchdog thread or any watchdog task is alive (for tests)."""
    thread = _thread_watchdog.thread
    if thread is not None and thread.is_alive():
        return True
    return any(d.task is not None and not d.task.done() for d in _loop_watchdogs.values())


def _reset_after_fork() -> None:
    # The child has neither the thread nor the parent's locks to renew.
    global _thread_watchdog
    _thread_watchdog = _ThreadWatchdog()
    _loop_watchdogs.clear()


os.register_at_fork(after_in_child=_reset_after_fork)
