"""Signals sent by locks. ``sender`` is the lock class (``Lock``, ``Redlock``, ...).

They are one consumer of the engine's event stream (:mod:`django_redislock.events`):
each is sent for one event, so they say exactly what the metrics and traces say.

They cache their receivers per sender (``use_caching``): with nothing connected
for a lock class, sending is one dictionary look-up, even while receivers are
connected for another sender.

They are sent with :func:`notify`: a receiver that raises is logged and the
other receivers still run; the error never reaches the lock's caller. A
signal reports what already happened in Redis (acquired, released, deleted):
letting a receiver's error escape would hide a lock the caller holds (an
``acquire`` that raised hands back no object to release) or make a release
that succeeded look failed.
"""

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("django_redislock.signals")

#: Sent after a lock was acquired. kwargs: ``lock`` (the lock object).
lock_acquired = Signal(use_caching=True)
#: Sent after a lock was released by its holder. kwargs: ``lock``.
lock_released = Signal(use_caching=True)
#: Sent once when a held lock was found lost (expired or taken over).
#: kwargs: ``lock``, ``reason`` (str).
lock_lost = Signal(use_caching=True)
#: Sent after ``force_release`` deleted a lock. kwargs: ``info`` (the
#: :class:`~django_redislock.LockInfo` of the holder that was removed), ``name``,
#: ``connection`` (alias), ``user`` (who did it, when known, else ``None``).
lock_force_released = Signal(use_caching=True)


#: Sent when an acquire gave up. kwargs: ``lock``, ``reason`` (``"timeout"``: its wait ran
#: out; ``"busy"``: refused with ``blocking=False`` / ``timeout=0``; ``"unavailable"``: its
#: server could not be reached; ``"deadlock"``), ``waited`` (seconds).
lock_acquire_failed = Signal(use_caching=True)

#: lock_acquire_failed's ``reason`` for each event type that gives up an acquire.
_FAILED_REASONS = {
    "timed_out": "timeout",
    "busy": "busy",
    "failed": "unavailable",
    "deadlock": "deadlock",
}


def listened(event_type: str, sender: Any) -> bool:
    """True when the signal sent for ``event_type`` has a receiver for ``sender``."""
    signal = _SIGNAL_OF.get(event_type)
    return signal is not None and signal.has_listeners(sender)


def deliver(event: Any) -> None:
    """Send the signal for one engine event (:class:`~django_redislock.events.LockEvent`):
    the signals are a consumer of the event stream, sent first."""
    kind = event.type
    if kind == "acquired":
        notify(lock_acquired, type(event.lock), lock=event.lock)
    elif kind == "released":
        notify(lock_released, type(event.lock), lock=event.lock)
    elif kind == "lost":
        notify(lock_lost, type(event.lock), lock=event.lock, reason=event.reason)
    elif kind == "force_released":
        notify(
            lock_force_released,
            event.lock_class,
            info=event.holder,
            name=event.name,
            connection=event.connection,
            user=event.user,
        )
    elif kind in _FAILED_REASONS:
        notify(
            lock_acquire_failed,
            type(event.lock),
            lock=event.lock,
            reason=_FAILED_REASONS[kind],
            waited=event.waited,
        )


def notify(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` to every receiver; log (never raise) a receiver's error."""
    if not signal.receivers:  # nobody connected at all: skip send_robust's look-ups
        return
    for receiver, result in signal.send_robust(sender=sender, **kwargs):
        if isinstance(result, Exception):
            logger.error(
                "A %s receiver (%s) failed: %r",
                _signal_names.get(id(signal), "lock signal"),
                getattr(receiver, "__qualname__", receiver),
                result,
                exc_info=result,
            )


_signal_names = {
    id(lock_acquired): "lock_acquired",
    id(lock_released): "lock_released",
    id(lock_lost): "lock_lost",
    id(lock_force_released): "lock_force_released",
    id(lock_acquire_failed): "lock_acquire_failed",
}

#: The signal each event type is sent as.
_SIGNAL_OF = {
    "acquired": lock_acquired,
    "released": lock_released,
    "lost": lock_lost,
    "force_released": lock_force_released,
    **dict.fromkeys(_FAILED_REASONS, lock_acquire_failed),
}
