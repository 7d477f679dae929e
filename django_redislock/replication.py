"""``WAIT`` for replicas after a lock write: ``Lock(..., wait_replicas=N, wait_timeout=s)``.

Redis replicates asynchronously: a primary that acknowledged our acquire can
crash before any replica received it, the replica is promoted, and a second
holder gets the same lock. ``WAIT N timeout`` after the write blocks until N
replicas acknowledged everything this connection wrote, or the timeout passed,
and returns how many did.

* **acquire**: fewer than N acknowledgements → the lock is released again
  (token-checked, on the primary) and :class:`ReplicasNotAcked` (a
  :class:`~django_redislock.exceptions.LockNotAcquired`) is raised, saying
  how many replicas answered. No retry: a lagging replica would make every
  retry wait ``wait_timeout`` too.
* **extend** (and the watchdog's renewals): the primary took the new TTL but
  fewer than N replicas did → :class:`ExtendNotReplicated` (a
  :class:`~django_redislock.exceptions.RedisLockError`). The lock is still
  held; its local validity (``valid_until``) is *not* moved forward, so the
  holder only trusts what the replicas know. The watchdog treats it like an
  unreachable server: it retries soon and marks the lock lost once the last
  replicated TTL has run out.

The ``WAIT`` is sent by the replicated transport
(:mod:`django_redislock.transports.replicated`); this module holds what its
answers mean for a lock: the errors and their messages, and the timeout.

It narrows the failover gap, it does not close it: ``WAIT`` does not make the
write durable on the replica (it is in memory there), Sentinel or the cluster
may still promote a replica that did not acknowledge, and the lock may be
acknowledged after our timeout gave up. See ``docs/operations.md``.
"""

from __future__ import annotations

from .conf import get_config
from .exceptions import LockNotAcquired, RedisLockError

#: Default ``wait_timeout`` when a lock asks for replicas and gives none (seconds).
DEFAULT_WAIT_TIMEOUT = 1.0
#: A WAIT must return before the socket read times out: keep this margin (seconds).
SOCKET_MARGIN = 0.5


class ReplicationError(RedisLockError):
    """Fewer replicas than asked acknowledged a lock write in time."""

    def __init__(
        self, message: str = "", *, lock_name: str | None = None, acked: int = 0, wanted: int = 0
    ) -> None:
        super().__init__(message, lock_name=lock_name)
        self.acked = acked
        self.wanted = wanted


class ReplicasNotAcked(ReplicationError, LockNotAcquired):
    """The acquire reached the primary but not enough replicas: released, not acquired."""

    def __init__(
        self, message: str = "", *, lock_name: str | None = None, acked: int = 0, wanted: int = 0
    ) -> None:
        super().__init__(message, lock_name=lock_name, acked=acked, wanted=wanted)
        self.remaining = None


class ExtendNotReplicated(ReplicationError):
    """The extend reached the primary but not enough replicas: validity not extended."""


def wait_timeout_ms(wait_timeout: float | None, ttl: float) -> int:
    """The ``WAIT`` timeout in ms: ``wait_timeout`` or the default, bounded.

    Never 0 (``WAIT n 0`` blocks forever), never more than a quarter of the TTL
    (the wait eats the holder's validity), and below ``SOCKET_TIMEOUT`` so the
    reply arrives before the socket read gives up.
    """
    seconds = DEFAULT_WAIT_TIMEOUT if wait_timeout is None else wait_timeout
    seconds = min(seconds, ttl / 4)
    socket_timeout = get_config()["SOCKET_TIMEOUT"]
    if socket_timeout:
        seconds = min(seconds, max(socket_timeout - SOCKET_MARGIN, socket_timeout / 2))
    return max(1, round(seconds * 1000))


# -- messages ----------------------------------------------------------------------


def not_acked(name: str, acked: int, wanted: int, ms: int) -> ReplicasNotAcked:
    return ReplicasNotAcked(
        f"Could not acquire lock {name!r}: only {acked} of {wanted} replica(s) acknowledged "
        f"it within {ms} ms (wait_replicas={wanted}); it was released again. A failover now "
        "could hand the lock to a second holder. Check the replicas' link to the primary "
        "(INFO replication) or lower wait_replicas.",
        lock_name=name,
        acked=acked,
        wanted=wanted,
    )


def extend_not_acked(name: str, acked: int, wanted: int, ms: int) -> ExtendNotReplicated:
    return ExtendNotReplicated(
        f"Extending lock {name!r}: only {acked} of {wanted} replica(s) acknowledged the new "
        f"TTL within {ms} ms. The lock is still held on the primary, but its validity was "
        "not extended; after a failover it would expire at the old time.",
        lock_name=name,
        acked=acked,
        wanted=wanted,
    )


__all__ = [
    "ExtendNotReplicated",
    "ReplicasNotAcked",
    "ReplicationError",
    "wait_timeout_ms",
]
