"""One stream of what happens to locks: the engine reports each outcome once, here.

The lifecycle (:mod:`~django_redislock.protocol`), the watchdog and ``force_release``
call :func:`emit` with a :class:`LockEvent`; the signals, the Prometheus metrics
(:mod:`django_redislock.contrib.prometheus`), the traces
(:mod:`django_redislock.contrib.otel`) and the history read that one event, so they
cannot disagree. A consumer is a callable taking the event (:func:`subscribe`); its
error is logged and never reaches the lock's caller, as with the signals: an event
reports what already happened in Redis.

The **family** (:func:`family_of`) is the bounded name metrics label a lock with: the
decorator's template, else ``metrics_name=``, else the name up to its first ``:``; at
most ``REDISLOCK["METRICS_FAMILIES"]`` of them per process, then ``"other"``. Lock names
themselves are never labels: one per invoice would grow a metric without bound.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import signals
from .conf import get_config

logger = logging.getLogger("django_redislock.events")

#: Acquired (``waited``: seconds from the call to the grant).
ACQUIRED = "acquired"
#: The first refusal of an acquire that then waits (``holder``: who refused it).
CONTENDED = "contended"
#: The acquire's timeout ran out (``waited``, ``holder``: the last refusal's holder).
TIMED_OUT = "timed_out"
#: Refused once with ``blocking=False`` / ``timeout=0`` (``holder``).
BUSY = "busy"
#: The lock's server could not be reached (``reason``: the error).
FAILED = "failed"
#: The acquire was cancelled (an asyncio task, a gevent/eventlet kill): nothing held.
CANCELLED = "cancelled"
#: Released by its holder (``held``: seconds since the grant).
RELEASED = "released"
#: Found lost while held: expired, taken over or force-released (``held``, ``reason``).
LOST = "lost"
#: ``force_release`` deleted a holder's lock (``holder``: the holder removed).
FORCE_RELEASED = "force_released"
#: An acquire refused to complete a wait-for cycle (a later issue reports it).
DEADLOCK = "deadlock"
#: The watchdog sent a renewal (``result``: ``"renewed"``, ``"lost"`` when it found the
#: lock gone, ``"error"`` when it failed and will be retried; ``reason``: the error).
RENEWAL = "renewal"

#: Every event type.
TYPES = frozenset(
    {
        ACQUIRED,
        CONTENDED,
        TIMED_OUT,
        BUSY,
        FAILED,
        CANCELLED,
        RELEASED,
        LOST,
        FORCE_RELEASED,
        DEADLOCK,
        RENEWAL,
    }
)

#: An acquire's outcome (one per acquire call) -> its ``result`` (a metric label, a span
#: attribute).
ACQUIRE_RESULTS = {
    ACQUIRED: "acquired",
    TIMED_OUT: "timeout",
    BUSY: "busy",
    FAILED: "unavailable",
    DEADLOCK: "deadlock",
    CANCELLED: "cancelled",
}

#: The family past the cap.
OTHER = "other"
#: Longest ``metrics_name`` accepted (a label value, not a key).
MAX_METRICS_NAME = 200


@dataclass(frozen=True, slots=True)
class LockEvent:
    """What happened to one lock, once. Fields that do not apply are ``None``."""

    #: One of :data:`TYPES`.
    type: str
    #: ``"lock"``, ``"redlock"``, ``"semaphore"``, ``"read"``, ``"write"``, ``"election"``.
    kind: str
    #: The lock's name (never a metric label: see :attr:`family`).
    name: str
    #: The fence of the grant (``acquired``, ``released``, ``lost``).
    fence: int | None = None
    #: The first characters of the token, as the admin shows them.
    token_prefix: str | None = None
    #: Who held the lock: the refusing holder (``contended``, ``busy``, ``timed_out``) or
    #: the holder removed (``force_released``); a ``HolderState`` or a ``LockInfo``.
    holder: Any = None
    #: Seconds the acquire waited (``acquired``, ``timed_out``, ``busy``, ``failed``,
    #: ``cancelled``).
    waited: float | None = None
    #: Seconds the lock was held (``released``, ``lost``).
    held: float | None = None
    #: Why (``lost``, ``failed``, ``renewal_failed``).
    reason: str | None = None
    #: Attempts sent by the acquire (the first one included).
    attempts: int | None = None
    #: A renewal's outcome (``renewal``): ``"renewed"``, ``"lost"`` or ``"error"``.
    result: str | None = None
    #: The lock object (``None`` for ``force_released``, which has none).
    lock: Any = None
    #: The connection alias (``force_released``).
    connection: str | None = None
    #: Who force-released it, when known (``force_released``).
    user: Any = None
    #: The lock class, the signals' sender, when there is no ``lock`` (``force_released``).
    lock_class: Any = None

    @property
    def family(self) -> str:
        """The bounded name metrics label it with (:func:`family_of`), worked out when a
        consumer first asks, so nothing is counted in a process that measures nothing."""
        lock = self.lock
        return family_of(self.name) if lock is None else str(lock.family)


Consumer = Callable[[LockEvent], Any]

# A tuple, replaced whole: emit() iterates it without a lock while others subscribe.
_consumers: tuple[Consumer, ...] = ()
_consumers_lock = threading.Lock()


def subscribe(consumer: Consumer) -> None:
    """Call ``consumer(event)`` for every event from now on (once, however often asked)."""
    global _consumers
    if not callable(consumer):
        raise TypeError(f"an event consumer must be callable, not {consumer!r}")
    with _consumers_lock:
        if consumer not in _consumers:
            _consumers = (*_consumers, consumer)


def unsubscribe(consumer: Consumer) -> None:
    """Stop calling ``consumer`` (nothing happens if it was not subscribed)."""
    global _consumers
    with _consumers_lock:
        _consumers = tuple(c for c in _consumers if c != consumer)


def subscribed(consumer: Consumer) -> bool:
    """True while ``consumer`` is called for every event."""
    return consumer in _consumers


def wanted(event_type: str, sender: Any) -> bool:
    """True when an event of ``event_type`` about a lock of class ``sender`` has a reader:
    a consumer, or a receiver of its signal. Asked before an event is built, so a process
    that listens to nothing pays a look-up per outcome, not an object."""
    return bool(_consumers) or signals.listened(event_type, sender)


def emit(event: LockEvent) -> None:
    """Hand ``event`` to the signals, then to every consumer; a consumer's error is
    logged, never raised."""
    signals.deliver(event)
    for consumer in _consumers:
        try:
            consumer(event)
        except Exception:
            logger.exception(
                "A lock event consumer (%s) failed on %s of %r",
                getattr(consumer, "__qualname__", consumer),
                event.type,
                event.name,
            )


# -- families ------------------------------------------------------------------------------

_families: set[str] = set()
_families_lock = threading.Lock()


def validate_metrics_name(metrics_name: object) -> str | None:
    """``metrics_name`` if it is ``None`` or a usable family, else ``ValueError`` naming it."""
    if metrics_name is None:
        return None
    if not isinstance(metrics_name, str) or not metrics_name.strip():
        raise ValueError(f"metrics_name must be a non-empty str, not {metrics_name!r}")
    if len(metrics_name) > MAX_METRICS_NAME:
        raise ValueError(
            f"metrics_name must be at most {MAX_METRICS_NAME} characters, not "
            f"{len(metrics_name)} ({metrics_name[:40]!r}...)"
        )
    return metrics_name


def family_of(name: str, metrics_name: str | None = None) -> str:
    """The family of lock ``name``: ``metrics_name`` if given (a decorator passes its
    template), else ``name`` up to its first ``:``. Past ``REDISLOCK["METRICS_FAMILIES"]``
    distinct families in this process, a new one is ``"other"``."""
    family = name.partition(":")[0] if metrics_name is None else metrics_name
    if family in _families:
        return family
    with _families_lock:
        if family in _families:
            return family
        if len(_families) >= get_config()["METRICS_FAMILIES"]:
            return OTHER
        _families.add(family)
    return family


def known_families() -> frozenset[str]:
    """The families this process has given out (``"other"`` aside)."""
    return frozenset(_families)


def reset_families() -> None:
    """Forget every family (for tests: a process normally keeps them for its lifetime)."""
    with _families_lock:
        _families.clear()


__all__ = [
    "ACQUIRED",
    "ACQUIRE_RESULTS",
    "BUSY",
    "CANCELLED",
    "CONTENDED",
    "DEADLOCK",
    "FAILED",
    "FORCE_RELEASED",
    "LOST",
    "OTHER",
    "RELEASED",
    "RENEWAL",
    "TIMED_OUT",
    "TYPES",
    "LockEvent",
    "emit",
    "family_of",
    "known_families",
    "reset_families",
    "subscribe",
    "subscribed",
    "unsubscribe",
    "validate_metrics_name",
    "wanted",
]
