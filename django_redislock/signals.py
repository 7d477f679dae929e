"""Signals sent by locks. ``sender`` is the lock class (``Lock`` or ``Redlock``).

They cache their receivers per sender (``use_caching``): with nothing connected
for a lock class, sending is one dictionary look-up, even while receivers are
connected for another sender.
"""

from django.dispatch import Signal

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
