"""Signals sent by locks. ``sender`` is the lock class (``Lock`` or ``Redlock``).

Each costs one dictionary look-up when nothing is connected.
"""

from django.dispatch import Signal

#: Sent after a lock was acquired. kwargs: ``lock`` (the lock object).
lock_acquired = Signal()
#: Sent after a lock was released by its holder. kwargs: ``lock``.
lock_released = Signal()
#: Sent once when a held lock was found lost (expired or taken over).
#: kwargs: ``lock``, ``reason`` (str).
lock_lost = Signal()
#: Sent after ``force_release`` deleted a lock. kwargs: ``info`` (the
#: :class:`~django_redislock.LockInfo` of the holder that was removed), ``name``,
#: ``connection`` (alias), ``user`` (who did it, when known, else ``None``).
lock_force_released = Signal()
