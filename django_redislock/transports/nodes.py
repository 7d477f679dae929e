"""Node calls of the quorum transport on an event loop, and what its rules read from
the replies.

A node call is an asyncio task on a ``redis.asyncio`` client, within its deadlines
(``Deadlines``: a frozen node costs one timeout and never blocks the others), queued
behind the lock's previous call on that node, for nodes a thread cannot drive itself
(fakeredis, Sentinel pools) and loops that cannot watch sockets. Async callers run them
on their own loop; sync callers on ONE long-lived background event loop thread per
process (created on first use, replaced after ``fork``). Every other caller sends from
its own thread or loop (:mod:`django_redislock.transports.exchange`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Awaitable, Sequence
from typing import Any, NamedTuple

from .. import leases
from ..connection import park_inherited
from ..exceptions import LockConfigurationError
from ..kinds import Operation
from . import wire
from .exchange import Enough

logger = logging.getLogger("django_redislock.redlock")


# -- the background event loop of the sync methods ------------------------------------
class _LoopThread:
    """One daemon thread running an event loop for the sync Redlock methods."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(ready,), name="redislock-redlock", daemon=True
        )
        self.thread.start()
        ready.wait()

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(ready.set)
        self.loop.run_forever()

    def submit(self, coro: Awaitable[Any]) -> concurrent.futures.Future[Any]:
        if threading.current_thread() is self.thread:
            raise RuntimeError("sync Redlock methods cannot be called from the Redlock loop")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)  # type: ignore[arg-type]


_runner: _LoopThread | None = None
_runner_lock = threading.Lock()


def background() -> _LoopThread:
    global _runner
    runner = _runner
    if runner is not None and runner.pid == os.getpid():
        return runner
    with _runner_lock:
        if _runner is None or _runner.pid != os.getpid():
            _runner = _LoopThread()
        return _runner


def run_sync(coro: Awaitable[Any]) -> Any:
    return background().submit(coro).result()


def _reset_after_fork() -> None:
    # The child has no loop thread: the next sync call starts a new one.
    global _runner, _runner_lock
    # The parent's loop and clients are kept, unused: see connection.park_inherited.
    park_inherited((_runner, set(_tasks)))
    _runner = None
    _tasks.clear()
    _runner_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)

# Strong references to node calls nobody awaits any more (stragglers).
_tasks: set[asyncio.Future[Any]] = set()


def keep(task: asyncio.Future[Any]) -> None:
    _tasks.add(task)
    task.add_done_callback(_forget_task)


def _forget_task(task: asyncio.Future[Any]) -> None:
    _tasks.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: a straggler's failure is no news


# -- node calls and scatter/gather ----------------------------------------------------
class Deadlines(NamedTuple):
    """How long one node may take: to answer a command, and to give a ready connection."""

    command: float
    connect: float


async def node_call(
    client: Any, op: leases.Op, deadlines: Deadlines, after: asyncio.Future[Any] | None
) -> Any:
    """Run ``op`` on one node within its deadlines, after its previous call ended.

    Queuing behind ``after`` (this lock's previous call on the same node) keeps a
    compare-and-delete from overtaking the acquire it cleans up after. Past a
    deadline the call reports a timeout at once and the library disconnects the
    connection it gave up on itself (:mod:`django_redislock.leases`).
    """
    if after is not None and not after.done():
        try:
            same_loop = after.get_loop() is asyncio.get_running_loop()
        except AttributeError:  # pragma: no cover - not an asyncio future
            same_loop = False
        if same_loop:
            await asyncio.wait({after}, timeout=deadlines.command)
    return await leases.call_within(client, op, deadlines.command, deadlines.connect)


async def capture(coro: Awaitable[Any]) -> Any:
    """The result, or the exception as a value (a node's failure is data here)."""
    try:
        return await coro
    except Exception as exc:
        return exc


def outcome(task: asyncio.Future[Any]) -> Any:
    if task.cancelled():
        return asyncio.CancelledError()
    return task.result()


def failed(result: Any) -> bool:
    return isinstance(result, BaseException)


def script_op(op: Operation) -> leases.Op:
    # The raw replies are gathered: a node's reply is counted, not parsed.
    return wire.Single(op)


def count(results: dict[str, Any], value: Any) -> int:
    return sum(1 for r in results.values() if not failed(r) and r == value)


def first_error(results: dict[str, Any]) -> BaseException | None:
    return next((r for r in results.values() if failed(r)), None)


def describe(exc: BaseException | None) -> str:
    if exc is None:
        return "no answer"
    if isinstance(exc, TimeoutError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


class AsyncExchange:
    """:class:`~django_redislock.transports.exchange.Exchange` for event loops: each node
    call a task on the running loop, queued behind the lock's previous call on that node
    (``inflight``), within its deadlines (:func:`leases.call_within`)."""

    def __init__(
        self,
        aliases: Sequence[str],
        deadlines: Deadlines,
        inflight: dict[str, asyncio.Future[Any]],
    ) -> None:
        self.aliases, self.deadlines, self.inflight = tuple(aliases), deadlines, inflight
        self.rounds: list[tuple[dict[str, asyncio.Future[Any]], dict[str, Any]]] = []

    async def asend(self, op: leases.Op, aliases: Sequence[str] | None = None) -> int:
        from ..connection import async_lock_client

        # Clients chosen when the round starts: a call queued behind an earlier one
        # stays with the settings it began under.
        targets = self.aliases if aliases is None else aliases
        clients = {alias: await async_lock_client(alias) for alias in targets}
        tasks: dict[str, asyncio.Future[Any]] = {}
        for alias, client in clients.items():
            after = self.inflight.get(alias)
            task = asyncio.ensure_future(capture(node_call(client, op, self.deadlines, after)))
            keep(task)
            self.inflight[alias] = tasks[alias] = task
        self.rounds.append((tasks, {}))
        return len(self.rounds) - 1

    async def agather(self, round_no: int, enough: Enough | None = None) -> dict[str, Any]:
        tasks, results = self.rounds[round_no]
        owner = {task: alias for alias, task in tasks.items()}
        pending = {task for alias, task in tasks.items() if alias not in results}
        while pending and not (enough is not None and enough(results)):
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                results[owner[task]] = outcome(task)
        for result in results.values():
            if isinstance(result, LockConfigurationError):
                raise result
        return results

    def close(self) -> None:
        """Nothing to give back: calls still running end within their own deadlines."""


class LoopExchange:
    """An :class:`AsyncExchange` on the background loop, for sync callers whose nodes a
    thread cannot drive itself."""

    def __init__(self, inner: AsyncExchange) -> None:
        self.inner = inner

    def send(self, op: leases.Op, aliases: Sequence[str] | None = None) -> int:
        return int(run_sync(self.inner.asend(op, aliases)))

    def gather(self, round_no: int, enough: Enough | None = None) -> dict[str, Any]:
        return dict(run_sync(self.inner.agather(round_no, enough)))

    def close(self) -> None:
        self.inner.close()


def majority_holder(
    state: dict[str, tuple[str | None, int]], quorum: int
) -> tuple[str, int] | None:
    """(token, ms until fewer than ``quorum`` nodes hold it), from :meth:`Nodes.holders`."""
    by_token: dict[str, list[int]] = {}
    for token, pttl in state.values():
        if token is not None:
            by_token.setdefault(token, []).append(pttl)
    for token, pttls in by_token.items():
        if len(pttls) >= quorum:
            pttls.sort(reverse=True)
            return token, pttls[quorum - 1]
    return None


def validate_connections(connections: object) -> tuple[str, ...]:
    """The node aliases of a Redlock: an odd number (>= 3) of distinct cache aliases."""
    if isinstance(connections, str) or not isinstance(connections, (list, tuple)):
        raise ValueError(
            f"Redlock connections must be a list of cache aliases, not {connections!r}"
        )
    aliases = tuple(connections)
    for alias in aliases:
        if not isinstance(alias, str) or not alias:
            raise ValueError(f"Redlock connections must be cache aliases (str), not {alias!r}")
    if len(set(aliases)) != len(aliases):
        raise ValueError(f"Redlock connections must be distinct: {list(aliases)!r}")
    if len(aliases) < 3 or len(aliases) % 2 == 0:
        raise ValueError(
            f"Redlock needs an odd number (>= 3) of independent nodes, got {len(aliases)}: "
            f"{list(aliases)!r} (set REDISLOCK['REDLOCK_CONNECTIONS'] or pass connections=...)"
        )
    return aliases


__all__ = [
    "AsyncExchange",
    "Deadlines",
    "LoopExchange",
    "background",
    "capture",
    "count",
    "describe",
    "failed",
    "first_error",
    "keep",
    "majority_holder",
    "node_call",
    "outcome",
    "run_sync",
    "script_op",
    "validate_connections",
]
