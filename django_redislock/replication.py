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

``WAIT`` counts the writes of *the connection it runs on*, so the script and
the ``WAIT`` are sent as one pipeline on one connection (one round trip). In a
cluster the pipeline goes to the node serving the lock's slot, on a plain
client of that node; a ``MOVED`` (resharding, failover) refreshes the slot map
and retries.

It narrows the failover gap, it does not close it: ``WAIT`` does not make the
write durable on the replica (it is in memory there), Sentinel or the cluster
may still promote a replica that did not acknowledge, and the lock may be
acknowledged after our timeout gave up. See ``docs/operations.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import (
    AskError,
    ClusterDownError,
    MovedError,
    NoScriptError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import leases
from .conf import get_config
from .connection import async_node_client, is_cluster
from .exceptions import LockNotAcquired, RedisLockError

#: Default ``wait_timeout`` when a lock asks for replicas and gives none (seconds).
DEFAULT_WAIT_TIMEOUT = 1.0
#: How long a cluster call keeps following redirects during a slot migration.
REDIRECT_DEADLINE = 2.0
#: A WAIT must return before the socket read times out: keep this margin (seconds).
SOCKET_MARGIN = 0.5

_REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)


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


# -- sync ----------------------------------------------------------------------


def call_and_wait(
    client: Any, script: Any, keys: Sequence[str], args: Sequence[Any], replicas: int, ms: int
) -> tuple[Any, int]:
    """Run ``script`` then ``WAIT replicas ms`` on one connection: (script reply, acks)."""
    if not is_cluster(client):
        return _pipeline(client, script, keys, args, replicas, ms)
    deadline = time.monotonic() + REDIRECT_DEADLINE
    while True:
        node = client.get_node_from_key(keys[0])
        try:
            return _pipeline(client.get_redis_connection(node), script, keys, args, replicas, ms)
        except _REDIRECTS:
            if time.monotonic() >= deadline:
                raise
            _refresh(client)
            time.sleep(0.02)
        except (RedisConnectionError, RedisTimeoutError):
            _refresh(client)  # a failover: the next call finds the new primary
            raise


def _refresh(cluster: Any) -> None:
    # Best effort: the next call retries; the caller reports the original error.
    with contextlib.suppress(Exception):
        cluster.nodes_manager.initialize()


def _pipeline(
    client: Any, script: Any, keys: Sequence[str], args: Sequence[Any], replicas: int, ms: int
) -> tuple[Any, int]:
    pipe = client.pipeline(transaction=False)
    pipe.evalsha(script.sha, len(keys), *keys, *args)
    pipe.execute_command("WAIT", replicas, ms)
    result, acked = pipe.execute(raise_on_error=False)
    if isinstance(result, NoScriptError):
        pipe = client.pipeline(transaction=False)
        pipe.eval(script.source, len(keys), *keys, *args)
        pipe.execute_command("WAIT", replicas, ms)
        result, acked = pipe.execute(raise_on_error=False)
    return _outcome(result, acked)


def _outcome(result: Any, acked: Any) -> tuple[Any, int]:
    if isinstance(result, Exception):
        raise result
    if isinstance(acked, Exception):
        raise acked
    return result, int(acked)


# -- asyncio ---------------------------------------------------------------------


async def acall_and_wait(
    alias: str,
    client: Any,
    script: Any,
    keys: Sequence[str],
    args: Sequence[Any],
    replicas: int,
    ms: int,
) -> tuple[Any, int]:
    """Async twin of :func:`call_and_wait` (``alias`` finds per-node clients)."""
    if not is_cluster(client):
        return await _apipeline(client, script, keys, args, replicas, ms)
    deadline = time.monotonic() + REDIRECT_DEADLINE
    while True:
        node = client.get_node_from_key(keys[0])
        node_client = await async_node_client(alias, node.host, node.port)
        try:
            return await _apipeline(node_client, script, keys, args, replicas, ms)
        except _REDIRECTS:
            if time.monotonic() >= deadline:
                raise
            await _arefresh(client)
            await asyncio.sleep(0.02)
        except (RedisConnectionError, RedisTimeoutError):
            await _arefresh(client)
            raise


async def _arefresh(cluster: Any) -> None:
    with contextlib.suppress(Exception):
        await cluster.nodes_manager.initialize()


async def _apipeline(
    client: Any, script: Any, keys: Sequence[str], args: Sequence[Any], replicas: int, ms: int
) -> tuple[Any, int]:
    # On a connection the library holds (leases): checked for a server-side close first.
    op = leases.ScriptThenWait(script, keys, args, replicas, ms)
    result, acked = await leases.call(client, op)
    return _outcome(result, acked)


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
    "acall_and_wait",
    "call_and_wait",
    "wait_timeout_ms",
]
