"""Transports: how a lock kind's operations reach Redis.

* :mod:`.wire`: sending scripts on one connection (EVALSHA, EVAL after NOSCRIPT),
  one call or a batch, sync and async: the only place that sends a script.
* :class:`~.single.SingleNode`: every operation on one server (a cache alias).
* :class:`~.replicated.Replicated`: the same, and ``WAIT`` for replicas after the
  operations that give or keep ownership.

Nothing is imported here, so that :mod:`django_redislock.scripts` can use
:mod:`.wire` without importing the transports.
"""
