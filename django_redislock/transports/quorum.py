"""The quorum transport: a kind's operations on several independent nodes, settled by a
majority (Redlock is the mutex kind over it).

Each call is written once, as a generator of steps (:mod:`django_redislock.steps`):
open an exchange, send an operation to the nodes, gather replies until the majority
rule decides. :func:`django_redislock.drivers.run` walks it for sync callers on an
:class:`~django_redislock.transports.exchange.Exchange` (written and read from the
caller's own thread), :func:`~django_redislock.drivers.arun` for async callers on an
:class:`AsyncExchange` (node calls as tasks on the caller's loop). Nodes a thread cannot
drive (fakeredis, Sentinel pools) get the async exchange on the background loop.

The rules here are the transport's: a reply counts only if it came within the validity
(``ttl`` minus the clock-drift margin, from just before the send); an acquire writes a
token fresh for each attempt (a late clean-up of one attempt can never delete the next
one's key), raises the fence where the granting majority lags (``fence_raise``), and
after a split vote asks the caller to retry after a random delay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Generator, Sequence
from typing import Any

from .. import clock, drivers, leases
from ..exceptions import LockBackendUnavailable, LockConfigurationError
from ..kinds import Operation
from ..steps import Send, Step
from . import exchange as sync_exchange
from .base import acall_each, call_each
from .nodes import (
    Deadlines,
    _capture,
    _keep,
    _node_call,
    count,
    describe,
    failed,
    first_error,
    outcome,
    run_sync,
    script_op,
)

logger = logging.getLogger("django_redislock.redlock")
acquire_logger = logging.getLogger("django_redislock.acquire")
Enough = Callable[[dict[str, Any]], bool]


#: validity = ttl - elapsed - (ttl * DRIFT_FACTOR + DRIFT_FIXED)
DRIFT_FACTOR = 0.01
DRIFT_FIXED = 0.002


def clock_drift(ttl: float) -> float:
    """Seconds of clock drift allowed for a lock of ``ttl`` seconds."""
    return ttl * DRIFT_FACTOR + DRIFT_FIXED


def validity_of(seconds: float) -> float:
    """How long a majority's grant (or renewal) of ``seconds`` may be trusted."""
    return seconds - clock_drift(seconds)


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
            task = asyncio.ensure_future(_capture(_node_call(client, op, self.deadlines, after)))
            _keep(task)
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


class Quorum:
    """The nodes of one lock as a transport: operations sent to every node at once, each
    settled by a majority within the validity."""

    __slots__ = (
        "behind",
        "connections",
        "deadlines",
        "inflight",
        "name",
        "quorum",
        "threaded",
        "tokens",
    )

    def __init__(self, name: str, connections: tuple[str, ...], deadlines: Deadlines) -> None:
        self.name, self.connections, self.deadlines = name, connections, deadlines
        #: How many nodes make a majority.
        self.quorum = len(connections) // 2 + 1
        # The lock's last call per node, so the next one queues behind it: a connection
        # still owed a reply (sync) or a task (async).
        self.behind: dict[str, Any] = {}
        self.inflight: dict[str, asyncio.Future[Any]] = {}
        # base token of an acquire -> the token its latest attempt wrote
        self.tokens: dict[str, str] = {}
        self.threaded: bool | None = None

    def idle(self) -> bool:
        """True when no node still owes a reply to a call of this lock (the calls return
        as soon as a majority decided; the others' replies are read after)."""
        tasks_done = all(task.done() for task in list(self.inflight.values()))
        return tasks_done and not any(owed.pending for owed in list(self.behind.values()))

    # -- exchanges ----------------------------------------------------------------------
    def open(self) -> Any:
        """An exchange for a sync caller: from its own thread when every node allows."""
        if self.threaded is None:
            self.threaded = sync_exchange.supports(self.connections)
        if self.threaded:
            # Until acquire moves over too: behind its calls still running on the loop.
            running = [task for task in self.inflight.values() if not task.done()]
            if running:
                run_sync(asyncio.wait(running, timeout=self.deadlines.command))
            return sync_exchange.Exchange(self.connections, self.deadlines, self.behind)
        return LoopExchange(AsyncExchange(self.connections, self.deadlines, self.inflight))

    async def aopen(self) -> AsyncExchange:
        return AsyncExchange(self.connections, self.deadlines, self.inflight)

    # -- calls --------------------------------------------------------------------------
    def settle(self, op: Operation) -> Generator[Step, Any, bool]:
        """True when a majority said 1 (within the validity, for an operation that gives
        ownership); False when a majority said 0 (or answered too late);
        ``LockBackendUnavailable`` when too few answered."""
        quorum, total = self.quorum, len(self.connections)

        def enough(results: dict[str, Any]) -> bool:
            return count(results, 1) >= quorum or count(results, 0) > total - quorum

        ex = yield Send(self, "open", ())
        try:
            started = clock.now()
            round_no = yield Send(ex, "send", (script_op(op),))
            results = yield Send(ex, "gather", (round_no, enough))
        finally:
            ex.close()
        if count(results, 1) >= quorum:
            return op.ttl_ms is None or clock.now() - started < validity_of(op.ttl_ms / 1000)
        self.raise_if_too_few(results, op.script.name)
        return False

    def call(self, op: Operation) -> bool:
        """:meth:`settle` for a sync caller."""
        return bool(drivers.run(self.settle(op)))

    async def acall(self, op: Operation) -> bool:
        """:meth:`settle` for an async caller."""
        return bool(await drivers.arun(self.settle(op)))

    @property
    def renew_group(self) -> None:
        """Never batched with other locks: each renewal is a call of its own."""
        return None

    def call_many(self, ops: Sequence[Operation]) -> list[Any]:
        return call_each(self.call, ops)

    async def acall_many(self, ops: Sequence[Operation]) -> list[Any]:
        return await acall_each(self.acall, ops)

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


__all__ = ["AsyncExchange", "LoopExchange", "Quorum", "clock_drift", "validity_of"]
