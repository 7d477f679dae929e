"""The single-node transport: each operation is one script call on one server."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from ..connection import async_lock_client, lock_client
from ..kinds.operation import Operation
from . import wire


class SingleNode:
    """Every operation on the server of one cache alias (a Cluster client routes by key)."""

    __slots__ = ("alias",)

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def renew_group(self) -> Hashable:
        """Locks whose transports share a group are renewed in one batch (the watchdog)."""
        return ("single", self.alias)

    def call(self, op: Operation) -> Any:
        """Send ``op``; its parsed reply. Redis errors raise."""
        return op.parse(wire.run(lock_client(self.alias), op))

    async def acall(self, op: Operation) -> Any:
        """Async :meth:`call`."""
        return op.parse(await wire.arun(await async_lock_client(self.alias), op))

    def call_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Send ``ops`` in one round trip: each parsed reply, or the exception it got."""
        try:
            replies = wire.run_batch(lock_client(self.alias), ops)
        except Exception as exc:  # the round trip failed: every call failed
            return [exc] * len(ops)
        return [_parsed(op, reply) for op, reply in zip(ops, replies, strict=False)]

    async def acall_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Async :meth:`call_many`."""
        try:
            replies = await wire.arun_batch(await async_lock_client(self.alias), ops)
        except Exception as exc:
            return [exc] * len(ops)
        return [_parsed(op, reply) for op, reply in zip(ops, replies, strict=False)]

    def __repr__(self) -> str:
        return f"<SingleNode {self.alias!r}>"


def _parsed(op: Operation, reply: Any) -> Any:
    return reply if isinstance(reply, Exception) else op.parse(reply)


__all__ = ["SingleNode"]
