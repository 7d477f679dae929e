"""What every transport offers: what a lock and the watchdog may ask of one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Protocol

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..kinds.operation import Operation

#: Errors that mean "the server could not be reached": the outcome is unknown.
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, ReadOnlyError, OSError)


def is_unreachable(exc: BaseException) -> bool:
    """True for errors meaning "this server cannot take the lock now": connection
    errors, timeouts, and a read-only replica (Redis 6 reports READONLY raised
    inside a script as a plain script error, so the message is checked too)."""
    return isinstance(exc, UNREACHABLE) or "READONLY" in str(exc)


def is_wrong_type(exc: BaseException) -> bool:
    """True for Redis's ``WRONGTYPE``: the key is held by another kind of lock (each kind
    keeps its main key in a Redis type of its own)."""
    return isinstance(exc, ResponseError) and "WRONGTYPE" in str(exc)


class WrongKind(ResponseError):
    """``WRONGTYPE`` from node ``alias`` of several: it holds the name as another kind."""

    def __init__(self, message: str, alias: str) -> None:
        super().__init__(message)
        self.alias = alias


def wrong_kind(results: dict[str, Any], aliases: Sequence[str]) -> WrongKind | None:
    """A :class:`WrongKind` for the first of ``aliases`` whose result is ``WRONGTYPE``."""
    for alias in aliases:
        result = results.get(alias)
        if isinstance(result, BaseException) and is_wrong_type(result):
            return WrongKind(str(result), alias)
    return None


class Transport(Protocol):
    """How a kind's operations reach Redis (one node, one node + WAIT, several nodes)."""

    @property
    def renew_group(self) -> Hashable | None:
        """Locks whose transports have the same group are renewed in one batch (None: never)."""

    def call(self, op: Operation) -> Any:
        """Send one operation: its parsed result. Redis errors raise."""

    async def acall(self, op: Operation) -> Any:
        """Async :meth:`call`."""

    def call_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Send several operations: each parsed result, or the exception it got."""

    async def acall_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Async :meth:`call_many`."""


def call_each(call: Callable[[Operation], Any], ops: Sequence[Operation]) -> list[Any]:
    """``call`` each operation alone: each result, or the exception it raised."""
    outcomes: list[Any] = []
    for op in ops:
        try:
            outcomes.append(call(op))
        except Exception as exc:
            outcomes.append(exc)
    return outcomes


async def acall_each(
    acall: Callable[[Operation], Awaitable[Any]], ops: Sequence[Operation]
) -> list[Any]:
    """Async :func:`call_each`: all at once, each result or its exception."""
    return list(await asyncio.gather(*(acall(op) for op in ops), return_exceptions=True))


__all__ = ["UNREACHABLE", "Transport", "acall_each", "call_each", "is_unreachable"]
