"""The replicated transport: one server, and ``WAIT`` for its replicas after each
operation that gives or keeps ownership (``Operation.durable``: acquire, extend).

``WAIT`` counts the writes of *the connection it runs on*, so the script and the
``WAIT`` go in one pipeline on one connection (one round trip). In a cluster the
pipeline goes to the node serving the lock's slot, on a plain client of that node;
a ``MOVED`` (resharding, failover) refreshes the slot map and retries. What fewer
acknowledgements mean is the lock's to decide: :class:`NotReplicated` carries the
parsed reply and the count (see :mod:`django_redislock.replication`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Generator, Sequence
from typing import Any

from redis.exceptions import AskError, ClusterDownError, MovedError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .. import drivers
from ..connection import async_lock_client, async_node_client, is_cluster, lock_client
from ..kinds.operation import Operation
from ..replication import ReplicationError, wait_timeout_ms
from ..steps import Send, Step, Wait
from . import wire
from .base import acall_each, call_each
from .single import SingleNode

#: How long a cluster call keeps following redirects during a slot migration.
REDIRECT_DEADLINE = 2.0

_REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)


class NotReplicated(ReplicationError):
    """A durable operation took effect on the primary (its result is true: granted,
    extended), but fewer replicas than asked acknowledged it."""

    def __init__(self, result: Any, acked: int, wanted: int, ms: int) -> None:
        super().__init__(
            f"only {acked} of {wanted} replica(s) acknowledged within {ms} ms",
            acked=acked,
            wanted=wanted,
        )
        self.result, self.ms = result, ms


class Replicated(SingleNode):
    """:class:`SingleNode` plus ``WAIT replicas`` after durable operations."""

    __slots__ = ("replicas", "ttl", "wait_timeout")

    def __init__(self, alias: str, replicas: int, wait_timeout: float | None, ttl: float) -> None:
        super().__init__(alias)
        self.replicas, self.wait_timeout, self.ttl = replicas, wait_timeout, ttl

    @property
    def renew_group(self) -> None:
        """Never batched: each renewal waits for its own acknowledgements."""
        return None

    def wait_ms(self) -> int:
        """The ``WAIT`` timeout (settings are read at each call: see ``wait_timeout_ms``)."""
        return wait_timeout_ms(self.wait_timeout, self.ttl)

    def call(self, op: Operation) -> Any:
        if not op.durable:
            return super().call(op)
        return drivers.run(self._durable(op))

    async def acall(self, op: Operation) -> Any:
        if not op.durable:
            return await super().acall(op)
        return await drivers.arun(self._durable(op))

    def _durable(self, op: Operation) -> Generator[Step, Any, Any]:
        ms = self.wait_ms()
        client = yield Send(_Node, "client", (self.alias,))
        reply, acked = yield from call_and_wait(self.alias, client, op, self.replicas, ms)
        return self._checked(op.parse(reply), acked, ms)

    def call_many(self, ops: Sequence[Operation]) -> list[Any]:
        # One by one: each WAIT counts its own connection's writes.
        return call_each(self.call, ops)

    async def acall_many(self, ops: Sequence[Operation]) -> list[Any]:
        # Concurrently, each on its own connection: each WAIT counts its own writes.
        return await acall_each(self.acall, ops)

    def _checked(self, result: Any, acked: int, ms: int) -> Any:
        # A false result (refused, not ours) wrote nothing: no acknowledgement to wait for.
        if result and acked < self.replicas:
            raise NotReplicated(result, acked, self.replicas, ms)
        return result

    def __repr__(self) -> str:
        return f"<Replicated {self.alias!r} replicas={self.replicas}>"


def call_and_wait(
    alias: str, client: Any, call: wire.ScriptCall, replicas: int, ms: int
) -> Generator[Step, Any, tuple[Any, int]]:
    """Run ``call`` then ``WAIT replicas ms`` on one connection: (raw reply, acks)."""
    wait = wire.Wait(replicas, ms)
    if not is_cluster(client):
        return _outcome((yield Send(_Node, "batch", (client, [call], wait))))
    deadline = time.monotonic() + REDIRECT_DEADLINE
    while True:
        node_client = yield Send(_Node, "pinned", (alias, client, call.keys[0]))
        try:
            return _outcome((yield Send(_Node, "batch", (node_client, [call], wait))))
        except _REDIRECTS:
            if time.monotonic() >= deadline:
                raise
            yield Send(_Node, "refresh", (client,))
            yield Wait(0.02, None)
        except (RedisConnectionError, RedisTimeoutError):
            yield Send(_Node, "refresh", (client,))  # a failover: the next call finds it
            raise


class _Node:
    """The calls of :func:`call_and_wait`, each with its async twin (the drivers pick)."""

    @staticmethod
    def client(alias: str) -> Any:
        return lock_client(alias)

    @staticmethod
    async def aclient(alias: str) -> Any:
        return await async_lock_client(alias)

    @staticmethod
    def pinned(alias: str, cluster: Any, key: str) -> Any:
        """A client of the node serving ``key``'s slot (``WAIT`` needs one connection)."""
        return cluster.get_redis_connection(cluster.get_node_from_key(key))

    @staticmethod
    async def apinned(alias: str, cluster: Any, key: str) -> Any:
        node = cluster.get_node_from_key(key)
        return await async_node_client(alias, node.host, node.port)

    batch = staticmethod(wire.run_batch)
    abatch = staticmethod(wire.arun_batch)

    @staticmethod
    def refresh(cluster: Any) -> None:
        # Best effort: the next call retries; the caller reports the original error.
        with contextlib.suppress(Exception):
            cluster.nodes_manager.initialize()

    @staticmethod
    async def arefresh(cluster: Any) -> None:
        with contextlib.suppress(Exception):
            await cluster.nodes_manager.initialize()


def _outcome(replies: list[Any]) -> tuple[Any, int]:
    result, acked = replies
    if isinstance(result, Exception):
        raise result
    if isinstance(acked, Exception):
        raise acked
    return result, int(acked)


__all__ = ["NotReplicated", "Replicated", "call_and_wait"]
