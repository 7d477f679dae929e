"""Signals sent by locks. ``sender`` is the lock class (``Lock`` or ``Redlock``).

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


def notify(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send ``signal`` to every receiver; log (never raise) a receiver's error."""
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
}
