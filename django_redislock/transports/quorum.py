"""The quorum transport: a kind's operations on several independent nodes, settled by a
majority (Redlock is the mutex kind over it).

Each call is written once, as a generator of steps (:mod:`django_redislock.steps`):
open an exchange, send an operation to the nodes, gather replies until the majority
rule decides. :func:`django_redislock.drivers.run` walks it for sync callers on an
:class:`~django_redislock.transports.exchange.Exchange` (written and read from the
caller's own thread), :func:`~django_redislock.drivers.arun` for async callers on the
same exchange, its sockets watched by the caller's loop. Nodes a thread cannot drive
(fakeredis, Sentinel pools) get :class:`AsyncExchange` (node calls as tasks on the
caller's loop, or on the background loop for sync callers).

The rules here are the transport's: a reply counts only if it came within the validity
(``ttl`` minus the clock-drift margin, from just before the send); an acquire writes a
token fresh for each attempt (a late clean-up of one attempt can never delete the next
one's key), raises the fence where the granting majority lags (``fence_raise``), and
after a split vote asks the caller to retry after a random delay.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
from collections.abc import Generator, Hashable, Sequence
from typing import Any

from .. import clock, drivers, leases
from ..exceptions import LockBackendUnavailable
from ..holder import held_token
from ..kinds import Holders, Mutex, Operation
from ..kinds.mutex import Attempt, Busy, Granted, HolderState, parse_acquire
from ..kinds.operation import text
from ..scripts import ACQUIRE, READ_HOLDER, RELEASE
from ..steps import Send, Step
from . import exchange as sync_exchange
from .base import WrongKind, wrong_kind
from .drift import validity_of
from .nodes import (
    AsyncExchange,
    Deadlines,
    LoopExchange,
    count,
    describe,
    failed,
    first_error,
    script_op,
)

logger = logging.getLogger("django_redislock.redlock")
acquire_logger = logging.getLogger("django_redislock.acquire")


class Quorum:
    """The nodes of one lock as a transport: operations sent to every node at once, each
    settled by a majority within the validity."""

    __slots__ = (
        "behind",
        "connections",
        "deadlines",
        "inflight",
        "kind",
        "name",
        "quorum",
        "releasing_valid",
        "threaded",
        "tokens",
    )

    def __init__(
        self, name: str, connections: tuple[str, ...], deadlines: Deadlines, kind: Mutex
    ) -> None:
        self.name, self.connections, self.deadlines = name, connections, deadlines
        #: The kind whose operations it sends (an acquire needs a fresh one per attempt).
        self.kind = kind
        #: How many nodes make a majority.
        self.quorum = len(connections) // 2 + 1
        #: token -> still valid when its release began (the lock tells, see release)
        self.releasing_valid: dict[str, bool] = {}
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
        if self._threaded():
            return sync_exchange.Exchange(self.connections, self.deadlines, self.behind)
        return LoopExchange(AsyncExchange(self.connections, self.deadlines, self.inflight))

    async def aopen(self) -> Any:
        """An exchange for an async caller: the same as a thread's, its sockets watched by
        the running loop, when every node and the loop allow."""
        if self._threaded() and sync_exchange.loop_supports(asyncio.get_running_loop()):
            return sync_exchange.Exchange(self.connections, self.deadlines, self.behind)
        return AsyncExchange(self.connections, self.deadlines, self.inflight)

    def _threaded(self) -> bool:
        """Can every node be driven from the caller's thread or loop (asked once)?"""
        if self.threaded is None:
            self.threaded = sync_exchange.supports(self.connections)
        return self.threaded

    # -- calls --------------------------------------------------------------------------
    def settle(self, op: Operation) -> Generator[Step, Any, bool]:
        """True when a majority said 1 (within the validity, for an operation that gives
        ownership); False when a majority said 0 (or answered too late);
        ``LockBackendUnavailable`` when too few answered."""
        (outcome,) = yield from self.settle_many([op])
        if isinstance(outcome, Exception):
            raise outcome
        return bool(outcome)

    def settle_many(self, ops: Sequence[Operation]) -> Generator[Step, Any, list[Any]]:
        """:meth:`settle` for several operations in one exchange (pipelined on each node's
        connection): each outcome, or the exception it got."""
        quorum = self.quorum

        def enough(results: dict[str, Any]) -> bool:
            return still_ours(results, quorum) is not None

        outcomes: list[Any] = []
        ex = yield Send(self, "open", ())
        try:
            started = clock.now()
            rounds = []
            for op in ops:
                rounds.append((yield Send(ex, "send", (script_op(op),))))
            for op, round_no in zip(ops, rounds, strict=True):
                results = yield Send(ex, "gather", (round_no, enough))
                try:
                    outcomes.append(self._settled(op, results, started))
                except Exception as exc:
                    outcomes.append(exc)
        finally:
            ex.close()
        return outcomes

    def _settled(self, op: Operation, results: dict[str, Any], started: float) -> bool:
        verdict = still_ours(results, self.quorum)
        if verdict:
            return op.ttl_ms is None or self._trust(op, started)
        self.raise_if_too_few(results, op.script.name)
        if verdict is None:  # a split: not a loss, the caller decides by its validity
            raise self._split(results, op.script.name)
        return False

    def _split(self, results: dict[str, Any], action: str) -> LockBackendUnavailable:
        """The error of a split: neither a majority did ``action`` nor says "not ours"."""
        done, refused, silent = self._sides(results)
        error = LockBackendUnavailable(
            f"Redlock {self.name!r}: could not {action} on a majority: done on "
            f"{', '.join(done) or 'none'}; not ours on {', '.join(refused) or 'none'}; "
            "no answer from "
            + ", ".join(f"{alias} ({describe(results.get(alias))})" for alias in silent),
            lock_name=self.name,
            aliases=silent,
        )
        error.__cause__ = first_error(results)
        return error

    def _sides(self, results: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
        """The nodes that did it (1), that say "not ours" (0) and that did not answer."""

        def said(alias: str, value: int) -> bool:
            return alias in results and not failed(results[alias]) and results[alias] == value

        done = [a for a in self.connections if said(a, 1)]
        refused = [a for a in self.connections if said(a, 0)]
        return done, refused, [a for a in self.connections if a not in done + refused]

    def steps(self, op: Operation) -> Generator[Step, Any, Any]:
        """The steps of ``op`` on the nodes: an acquire attempt, a release, or a call a
        majority settles by saying 1 or 0."""
        if op.script is ACQUIRE:
            return self.acquire(op.args[0])
        if op.script is RELEASE:
            return self.release(op.args[0])
        if op.script is READ_HOLDER:
            return self.read_holder(op)
        return self.settle(op)

    def call(self, op: Operation) -> Any:
        """Run ``op`` on the nodes from this thread (see :meth:`steps`)."""
        return drivers.run(self.steps(op))

    async def acall(self, op: Operation) -> Any:
        """Run ``op`` on the nodes from the running event loop (see :meth:`steps`)."""
        return await drivers.arun(self.steps(op))

    def holders_of(self, key: str) -> dict[str, tuple[str | None, int]]:
        """:meth:`holders` from this thread."""
        return dict(drivers.run(self.holders(key)))

    async def aholders_of(self, key: str) -> dict[str, tuple[str | None, int]]:
        """:meth:`holders` from the running event loop."""
        return dict(await drivers.arun(self.holders(key)))

    # -- acquire ------------------------------------------------------------------------
    def acquire(self, base_token: str) -> Generator[Step, Any, Attempt]:
        """One attempt: Granted (with the token it wrote) or Busy; unavailable when too
        few nodes answered. A fresh token per attempt: a late clean-up of one attempt
        can never delete the next one's key."""
        token = self.tokens[base_token] = secrets.token_urlsafe(16)
        op = self.kind.acquire(token)
        quorum, total = self.quorum, len(self.connections)

        def enough(results: dict[str, Any]) -> bool:
            granted = sum(1 for r in results.values() if granted_by(r))
            return granted >= quorum or len(results) - granted > total - quorum

        ex = yield Send(self, "open", ())
        try:
            started = clock.now()
            first = yield Send(ex, "send", (script_op(op),))
            results = yield Send(ex, "gather", (first, enough))
            grants = {alias: int(r[1]) for alias, r in results.items() if granted_by(r)}
            if len(grants) >= quorum:
                fence, written = 0, True
                if self.kind.fencing:
                    fence = max(grants.values())
                    written = yield from self._write_back(ex, token, fence, grants)
                if written and self._trust(op, started):
                    del self.tokens[base_token]
                    return Granted(fence, token)
                acquire_logger.debug(
                    "Redlock %r: majority granted but %s", self.name,
                    "the fence write-back failed" if not written else "no validity left",
                )  # fmt: skip
            acquire_logger.debug(
                "Redlock %r attempt failed: %s", self.name,
                {alias: describe(r) if failed(r) else r for alias, r in results.items()},
            )  # fmt: skip
            del self.tokens[base_token]  # undone here: no later clean-up needs it
            return (yield from self._refused(ex, token, results, first, started))
        except BaseException as exc:
            if not isinstance(exc, Exception) and isinstance(ex, sync_exchange.Exchange):
                # Interrupted (KeyboardInterrupt...): the undo is written behind the acquire.
                ex.send(script_op(self.kind.release(token)))
            raise
        finally:
            ex.close()

    @staticmethod
    def _trust(op: Operation, started: float) -> bool:
        """Did the majority's answer come within the validity of what ``op`` grants?"""
        return clock.now() - started < validity_of((op.ttl_ms or 0) / 1000)

    def _write_back(
        self, ex: Any, token: str, fence: int, grants: dict[str, int]
    ) -> Generator[Step, Any, bool]:
        """Make counter >= fence hold on a majority of nodes where our token holds."""
        lagging = [alias for alias, counter in grants.items() if counter < fence]
        need = self.quorum - (len(grants) - len(lagging))
        if not lagging:
            return need <= 0
        op = script_op(self.kind.fence_raise(token, fence))
        round_no = yield Send(ex, "send", (op, lagging))
        if need <= 0:
            return True  # already held on a majority: the others are raised without waiting

        def enough(results: dict[str, Any]) -> bool:
            ok = count(results, 1)
            return ok >= need or len(results) - ok > len(lagging) - need

        results = yield Send(ex, "gather", (round_no, enough))
        return count(results, 1) >= need

    def _refused(
        self, ex: Any, token: str, results: dict[str, Any], first: int, started: float
    ) -> Generator[Step, Any, Busy]:
        """After a failed attempt: our token deleted everywhere (each delete behind that
        node's acquire); Busy, or unavailable."""
        quorum = self.quorum
        clean = yield Send(ex, "send", (script_op(self.kind.release(token)),))
        answered = [alias for alias, r in results.items() if not failed(r)]
        pending = [alias for alias in self.connections if alias not in results]
        if len(answered) < quorum and pending:
            # Not enough answers yet to tell "busy" from "unavailable" (or, when too many
            # failed, to name the nodes that did not answer and clean up on the others):
            # wait for the rest, each within its deadline.
            results = yield Send(ex, "gather", (first, None))
            answered = [alias for alias, r in results.items() if not failed(r)]
        if answered:  # the nodes that answered are cleaned before we return
            cleaned = yield Send(ex, "gather", (clean, lambda r: all(a in r for a in answered)))
            self._log_cleanup_failures(cleaned)
        if len(answered) < quorum:
            raise too_few_answered(self, answered, results)
        held = sorted(
            int(r[1]) for r in results.values() if not failed(r) and not granted_by(r) and r[1] > 0
        )
        if len(held) >= quorum:  # a holder has a majority: wait for it
            return Busy(held[0], None, majority_busy_holder(results, held[0], quorum))
        # A split vote (or no validity left): retry after a random delay, so that
        # competing clients do not collide again.
        elapsed = clock.now() - started
        spread = min(max(3 * elapsed, 0.001), self.kind.ttl_ms / 10_000)
        return Busy(max(1, round(random.uniform(0, spread) * 1000)))

    def _log_cleanup_failures(self, cleaned: dict[str, Any]) -> None:
        for alias, result in cleaned.items():
            if failed(result):
                acquire_logger.info(
                    "Redlock %r: could not clean up on %s (%s); the key expires in %.3fs",
                    self.name, alias, describe(result), self.kind.ttl_ms / 1000,
                )  # fmt: skip

    # -- release ------------------------------------------------------------------------
    def release(self, token: str) -> Generator[Step, Any, bool]:
        """True when released: on a majority, or, within validity, unless a majority of
        the nodes says another holder (or nobody) has the key.

        Within validity the lock was ours on a majority; a node that did not answer
        keeps our key until its TTL, and one that reports "not ours" never had it (or
        lost it alone): neither makes the holder a non-owner. Past validity a majority
        has to confirm the release. (A clean-up after an attempt releases the token
        that attempt wrote.)
        """
        token = self.tokens.pop(token, token)
        valid = self.releasing_valid.pop(token, False)
        quorum = self.quorum

        def enough(results: dict[str, Any]) -> bool:
            return still_ours(results, quorum) is not None

        ex = yield Send(self, "open", ())
        try:
            round_no = yield Send(ex, "send", (script_op(self.kind.release(token)),))
            results = yield Send(ex, "gather", (round_no, enough))
        finally:
            ex.close()
        verdict = still_ours(results, quorum)
        if verdict:
            return True
        self.raise_if_too_few(results, "release")
        if verdict is False or not valid:
            return False
        done, refused, silent = self._sides(results)
        logger.warning(
            "Redlock %r released on %d of %d nodes within its validity; not ours on %s; "
            "no answer from %s, where our key stays until its TTL (%.3fs at most)",
            self.name, len(done), len(self.connections), refused or "none",
            [f"{a} ({describe(results.get(a))})" for a in silent] or "none",
            self.kind.ttl_ms / 1000,
        )  # fmt: skip
        return True

    # -- queries ------------------------------------------------------------------------
    def read_holder(self, op: Operation) -> Generator[Step, Any, HolderState | None]:
        """The holder on a majority of the nodes (its highest fence there, and the ms until
        fewer than a majority hold it), or None; unavailable below a majority."""
        ex = yield Send(self, "open", ())
        try:
            round_no = yield Send(ex, "send", (script_op(op),))
            results = yield Send(ex, "gather", (round_no, None))
        finally:
            ex.close()
        if sum(1 for r in results.values() if not failed(r)) < self.quorum:
            self.raise_if_too_few(results, "query")
        by_token: dict[str, list[HolderState]] = {}
        for result in results.values():
            read = None if failed(result) else op.parse(result)
            # A node's read: its holders (read_holders), or its holder (read_holder).
            for holder in read.states if isinstance(read, Holders) else filter(None, [read]):
                by_token.setdefault(holder.token, []).append(holder)
        for holders in by_token.values():
            if len(holders) >= self.quorum:
                pttl = sorted((h.pttl_ms for h in holders), reverse=True)[self.quorum - 1]
                return holders[0]._replace(pttl_ms=pttl, fence=max(h.fence for h in holders))
        return None

    def holders(self, key: str) -> Generator[Step, Any, dict[str, tuple[str | None, int]]]:
        """(token, pttl ms) of ``key`` per node that answered; LockBackendUnavailable
        below a majority."""
        ex = yield Send(self, "open", ())
        try:
            round_no = yield Send(ex, "send", (leases.GetAndPttl(key),))
            results = yield Send(ex, "gather", (round_no, None))
        finally:
            ex.close()
        state = {
            alias: (None if r[0] is None else held_token(text(r[0])), int(r[1]))
            for alias, r in results.items()
            if not failed(r)
        }
        if len(state) < self.quorum:
            self.raise_if_too_few(results, "query")
        return state

    @property
    def renew_group(self) -> Hashable:
        """Locks on the same nodes are renewed in one exchange (the watchdog)."""
        return ("quorum", self.connections, self.deadlines)

    def call_many(self, ops: Sequence[Operation]) -> list[Any]:
        """Extends (renewals) in one exchange from this thread: each True/False or error."""
        return list(drivers.run(self.settle_many(ops)))

    async def acall_many(self, ops: Sequence[Operation]) -> list[Any]:
        """:meth:`call_many` from the running event loop."""
        return list(await drivers.arun(self.settle_many(ops)))

    def raise_if_too_few(self, results: dict[str, Any], action: str) -> None:
        """``LockBackendUnavailable`` when fewer than a majority answered and no majority
        said "not yours" (that is ``LockNotOwned``'s to report)."""
        answered = [alias for alias, r in results.items() if not failed(r)]
        if count(results, 0) > len(self.connections) - self.quorum:
            return
        if len(answered) < self.quorum:
            missing = [alias for alias in self.connections if alias not in answered]
            wrong = wrong_kind(results, missing)
            if wrong is not None:  # the name is another kind's there: not an outage
                raise wrong
            raise LockBackendUnavailable(
                f"Redlock {self.name!r}: could not {action} on a majority; only "
                f"{len(answered)} of {len(self.connections)} nodes answered; unreachable: "
                + ", ".join(f"{alias} ({describe(results.get(alias))})" for alias in missing),
                lock_name=self.name,
                aliases=missing,
            ) from first_error(results)


def still_ours(results: dict[str, Any], quorum: int) -> bool | None:
    """Do we still hold it, by the nodes' answers to a release or a renewal of our token:
    True when a majority did it, False when a majority says "not ours", None for a split.

    The one rule release and renewal share. A split (one did it, one says "not ours", one
    silent) within validity is not a loss: the lock was ours on a majority and our key
    stays on a silent node until its TTL. So a release within validity counts as done
    and the watchdog retries the renewal; past validity the lock is lost.
    """
    if count(results, 1) >= quorum:
        return True
    if count(results, 0) >= quorum:
        return False
    return None


def granted_by(result: Any) -> bool:
    """A node's acquire reply says it granted."""
    return not failed(result) and int(result[0]) == 1


def majority_busy_holder(results: dict[str, Any], pttl_ms: int, quorum: int) -> HolderState | None:
    """The holder that refused us on a majority of the nodes (from their replies)."""
    seen: dict[str, list[HolderState]] = {}
    for result in results.values():
        if failed(result) or granted_by(result):
            continue
        holder = parse_acquire(result)
        if isinstance(holder, Busy) and holder.holder is not None:
            seen.setdefault(holder.holder.token, []).append(holder.holder)
    for holders in seen.values():
        if len(holders) >= quorum:
            return holders[0]._replace(pttl_ms=pttl_ms)
    return None


def too_few_answered(
    quorum: Quorum, answered: list[str], results: dict[str, Any]
) -> LockBackendUnavailable | WrongKind:
    """Fewer than a majority answered an acquire: unavailable, naming the silent nodes
    (or a node holds the name as another kind of lock)."""
    missing = [alias for alias in quorum.connections if alias not in answered]
    wrong = wrong_kind(results, missing)
    if wrong is not None:
        return wrong
    errors = {alias: results.get(alias) for alias in missing}
    error = LockBackendUnavailable(
        f"Redlock {quorum.name!r}: only {len(answered)} of {len(quorum.connections)} nodes "
        f"answered, {quorum.quorum} needed; unreachable: "
        + ", ".join(f"{alias} ({describe(errors[alias])})" for alias in missing),
        lock_name=quorum.name,
        aliases=missing,
    )
    error.__cause__ = first_error({a: e for a, e in errors.items() if e is not None})
    return error


__all__ = ["Quorum"]
