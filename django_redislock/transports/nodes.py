"""Redlock's nodes: calls on several independent primaries at once, and the background
event loop that runs them for sync callers.

Each step (acquire, fence write-back, extend, release, the queries) is sent to every
node at once and the replies are gathered: the node calls are asyncio tasks on
``redis.asyncio`` clients, run in the caller's event loop for async callers and, for
sync ones, in ONE long-lived background event loop thread per process (created on
first use, replaced after ``fork``). Every node call has its own timeout
(``Deadlines``), so a frozen node costs one timeout and never blocks the others.
:class:`Nodes` is the transport for the operations a majority settles by saying 1 or 0.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, NamedTuple

from .. import clock, leases
from ..connection import async_lock_client, park_inherited
from ..exceptions import LockBackendUnavailable, LockConfigurationError
from ..kinds import Operation
from . import wire
from .base import acall_each, call_each

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


def _keep(task: asyncio.Future[Any]) -> None:
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


async def _node_call(
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


async def _capture(coro: Awaitable[Any]) -> Any:
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


async def scatter(
    aliases: Iterable[str],
    op: leases.Op,
    deadlines: Deadlines,
    inflight: dict[str, asyncio.Future[Any]] | None,
    enough: Callable[[dict[str, Any]], bool] | None = None,
) -> tuple[dict[str, Any], dict[str, asyncio.Future[Any]]]:
    """Send ``op`` to every alias at once; gather replies until ``enough`` says so.

    Returns (results so far by alias, every task by alias). Tasks still running
    go on in the background (their own timeout bounds them).
    """
    tasks: dict[str, asyncio.Future[Any]] = {}
    # Clients chosen when the step starts: a call queued behind an earlier one stays
    # with the settings it began under.
    clients = {alias: await async_lock_client(alias) for alias in aliases}
    for alias, client in clients.items():
        after = inflight.get(alias) if inflight is not None else None
        task = asyncio.ensure_future(_capture(_node_call(client, op, deadlines, after)))
        _keep(task)
        if inflight is not None:
            inflight[alias] = task
        tasks[alias] = task
    owner = {task: alias for alias, task in tasks.items()}
    results: dict[str, Any] = {}
    pending = set(tasks.values())
    while pending and not (enough is not None and enough(results)):
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            results[owner[task]] = outcome(task)
    for result in results.values():
        if isinstance(result, LockConfigurationError):
            raise result
    return results, tasks


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


async def release_on(
    aliases: Sequence[str],
    op: Operation,
    deadlines: Deadlines,
    inflight: dict[str, asyncio.Future[Any]] | None,
    quorum: int,
) -> tuple[int, dict[str, Any]]:
    """Compare-and-delete (``op``: the kind's release) on every node; (released count, results).

    Gathers until a majority released, a majority said "not ours", or every node
    answered or timed out: a release is judged on what each node said.
    """

    def enough(results: dict[str, Any]) -> bool:
        return count(results, 1) >= quorum or count(results, 0) >= quorum

    results, _ = await scatter(aliases, script_op(op), deadlines, inflight, enough)
    return count(results, 1), results


class Nodes:
    """Redlock's nodes as a transport, for the operations a majority settles by saying
    1 or 0 (extend; release): each is sent to every node at once, replies are gathered
    until a majority said the same, and the answer counts only if it came within the
    validity. The watchdog renews, and releases a collected Redlock, through it.
    Acquire and the caller's release keep their own rules in :class:`Redlock`.
    """

    __slots__ = ("connections", "deadlines", "inflight", "name", "quorum", "validity")

    def __init__(
        self, name: str, connections: tuple[str, ...], deadlines: Deadlines, validity: float
    ) -> None:
        self.name, self.connections, self.deadlines = name, connections, deadlines
        #: How many nodes make a majority.
        self.quorum = len(connections) // 2 + 1
        #: Seconds a majority's answer may be trusted from just before the send.
        self.validity = validity
        # The last call per node, so the next one queues behind it.
        self.inflight: dict[str, asyncio.Future[Any]] = {}

    @property
    def renew_group(self) -> None:
        """Never batched: each renewal is a scatter of its own."""
        return None

    async def acall(self, op: Operation, validity: float | None = None) -> bool:
        """True when a majority said 1 in time; False when a majority (or too late) did not.

        ``LockBackendUnavailable`` when too few nodes answered to tell.
        """
        quorum, total = self.quorum, len(self.connections)

        def enough(results: dict[str, Any]) -> bool:
            return count(results, 1) >= quorum or count(results, 0) > total - quorum

        started = clock.now()
        results, _ = await scatter(
            self.connections, script_op(op), self.deadlines, self.inflight, enough
        )
        if count(results, 1) >= quorum:
            return clock.now() - started < (self.validity if validity is None else validity)
        self.raise_if_too_few(results, op.script.name)
        return False

    def call(self, op: Operation) -> bool:
        """:meth:`acall` from a thread, on the Redlock loop thread."""
        return bool(run_sync(self.acall(op)))

    def call_many(self, ops: Sequence[Operation]) -> list[Any]:
        return call_each(self.call, ops)

    async def acall_many(self, ops: Sequence[Operation]) -> list[Any]:
        return await acall_each(self.acall, ops)

    async def holders(self, key: str) -> dict[str, tuple[str | None, int]]:
        """(token, pttl ms) of ``key`` per node that answered; LockBackendUnavailable
        below a majority."""
        results, _ = await scatter(self.connections, leases.GetAndPttl(key), self.deadlines, None)
        state = {
            alias: (None if r[0] is None else r[0].decode(), int(r[1]))
            for alias, r in results.items()
            if not failed(r)
        }
        if len(state) < self.quorum:
            self.raise_if_too_few(results, "query")
        return state

    def raise_if_too_few(self, results: dict[str, Any], action: str) -> None:
        """``LockBackendUnavailable`` when fewer than a majority answered and no majority
        said "not yours" (that is ``LockNotOwned``'s to report)."""
        answered = [alias for alias, r in results.items() if not failed(r)]
        if count(results, 0) > len(self.connections) - self.quorum:
            return
        if len(answered) < self.quorum:
            missing = [alias for alias in self.connections if alias not in answered]
            raise LockBackendUnavailable(
                f"Redlock {self.name!r}: could not {action} on a majority; only "
                f"{len(answered)} of {len(self.connections)} nodes answered; unreachable: "
                + ", ".join(f"{alias} ({describe(results.get(alias))})" for alias in missing),
                lock_name=self.name,
                aliases=missing,
            ) from first_error(results)


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
    "Deadlines",
    "Nodes",
    "background",
    "count",
    "describe",
    "failed",
    "first_error",
    "majority_holder",
    "outcome",
    "release_on",
    "run_sync",
    "scatter",
    "script_op",
    "validate_connections",
]
