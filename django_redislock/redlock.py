"""Redlock: one lock over several independent Redis primaries, with fences that grow.

Each step is sent to every node at once and the replies are gathered
(:mod:`django_redislock.transports.nodes`); every node call has its own timeout, a
small fraction of the TTL (``node_timeout``), so a frozen node costs one timeout.

Acquire (one attempt; :class:`~django_redislock.lock.BaseLock` does the
waiting and retrying):

1. ``started`` = monotonic clock before the first send; every node runs the
   single-node acquire script (``SET NX PX`` + ``INCR`` of the node's fence
   counter + metadata) with a token fresh for this attempt.
2. A majority granted? fence = the highest counter among the grants. Every
   granted node whose counter is already that high needs nothing more; if they
   are fewer than a majority, the fence is written back
   (``counter = max(counter, fence)`` where our token still holds,
   ``fence_raise.lua``) until a majority holds it.
3. validity = ttl - elapsed - (ttl * 0.01 + 2 ms) must be > 0; the holder may
   trust the lock until ``started + ttl - drift`` (``lock.valid_until``).
4. Otherwise: compare-and-delete on every node (also those that did not
   answer), each queued behind that node's own earlier call so it cannot
   overtake it, then report the holder's TTL (or a short random delay after a
   split vote) so the caller retries. Fewer than a majority answering raises
   :class:`LockBackendUnavailable` naming the nodes that did not.

See ``docs/redlock.md`` for why the fences strictly grow and what Redlock does
not guarantee.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
from collections.abc import Callable, Sequence
from typing import Any

from . import clock
from .base import UNREACHABLE, BaseLock, new_token
from .conf import get_config
from .exceptions import LockBackendUnavailable, RedisLockError
from .keys import validate_seconds
from .kinds import Mutex, Operation
from .kinds.mutex import Attempt, Busy, Granted, HolderState, parse_acquire
from .transports.nodes import (
    Deadlines,
    Nodes,
    background,
    count,
    describe,
    failed,
    first_error,
    majority_holder,
    outcome,
    release_on,
    run_sync,
    scatter,
    script_op,
    validate_connections,
)
from .transports.quorum import Quorum

logger = logging.getLogger("django_redislock.redlock")
acquire_logger = logging.getLogger("django_redislock.acquire")

#: validity = ttl - elapsed - (ttl * DRIFT_FACTOR + DRIFT_FIXED)
DRIFT_FACTOR = 0.01
DRIFT_FIXED = 0.002
#: Default per-node timeout: this fraction of the TTL, clamped to the bounds below.
NODE_TIMEOUT_FRACTION = 0.1
NODE_TIMEOUT_MIN = 0.05
NODE_TIMEOUT_MAX = 0.25


def clock_drift(ttl: float) -> float:
    """Seconds of clock drift allowed for a lock of ``ttl`` seconds."""
    return ttl * DRIFT_FACTOR + DRIFT_FIXED


def default_node_timeout(ttl: float) -> float:
    """The per-node timeout used when none is given: ttl/10 within 50..250 ms, <= ttl/3."""
    floor = min(NODE_TIMEOUT_MIN, ttl / 3)
    return min(max(ttl * NODE_TIMEOUT_FRACTION, floor), NODE_TIMEOUT_MAX)


def connect_budget(ttl: float, node_timeout: float) -> float:
    """Seconds a node may take to give a ready connection, outside ``node_timeout``.

    A pooled connection is ready at once; a new one pays TCP connect, the
    handshake and the script loading of a first call, several round trips that
    a loaded machine can stretch past a node timeout of a few tens of ms.
    ``SOCKET_CONNECT_TIMEOUT``, at most half the TTL, never below ``node_timeout``.
    The time counts against the lock's validity like any other.
    """
    return max(node_timeout, min(get_config()["SOCKET_CONNECT_TIMEOUT"], ttl / 2))


class Redlock(BaseLock):
    """A lock held on a majority of independent Redis primaries (django-redis aliases).

    Same surface as :class:`~django_redislock.Lock` (sync and async, ``with`` /
    ``async with``, ``extend``, ``owned``, ``locked``, ``remaining``, ``token``,
    ``fence``, ``lost``, watchdog). ``connections``: an odd number (>= 3) of
    cache aliases, default ``REDISLOCK["REDLOCK_CONNECTIONS"]``. ``node_timeout``:
    seconds one node may take to answer one step (default ttl/10 within
    50..250 ms, at most ttl/3). See ``docs/redlock.md``.
    """

    def __init__(
        self,
        name: str,
        *,
        connections: Sequence[str] | None = None,
        ttl: float | None = None,
        timeout: float | None = None,
        blocking: bool = True,
        watchdog: bool | None = None,
        fencing: bool = True,
        purpose: str | None = None,
        on_lost: Callable[[Any], Any] | None = None,
        max_hold: float | None = None,
        node_timeout: float | None = None,
    ) -> None:
        super().__init__(
            name,
            ttl=ttl,
            timeout=timeout,
            blocking=blocking,
            watchdog=watchdog,
            fencing=fencing,
            purpose=purpose,
            on_lost=on_lost,
            max_hold=max_hold,
        )
        self.connections: tuple[str, ...] = validate_connections(
            get_config()["REDLOCK_CONNECTIONS"] if connections is None else connections
        )
        #: How many nodes make a majority.
        self.quorum = len(self.connections) // 2 + 1
        self.node_timeout = (
            default_node_timeout(self.ttl)
            if node_timeout is None
            else validate_seconds(node_timeout, "node_timeout", allow_zero=False)
        )
        #: Seconds one node may take to give a ready connection (see connect_budget).
        self.connect_timeout = connect_budget(self.ttl, self.node_timeout)
        self._deadlines = Deadlines(self.node_timeout, self.connect_timeout)
        # No claims, no hand-over: Redlock waiters take turns by retrying.
        self.ops = Mutex.of(self, claim_ms=None, hand_over=False)
        self.transport = Quorum(self.name, self.connections, self._deadlines)
        self._nodes = Nodes(self.name, self.connections, self._deadlines, self.validity)
        # This object's last call per node, so the next one queues behind it.
        self._inflight = self._nodes.inflight = self.transport.inflight
        # (base token of the acquire call, token of its current attempt, jitter before retry)
        self._attempt: tuple[str, str, float] | None = None
        # Whether the lock being released was still valid when its release began.
        self._releasing_valid = False

    # -- validity -------------------------------------------------------------------
    def _took(self, token: str, fence: int, started: float, *, in_loop: bool = False) -> None:
        # Each attempt writes its own token (so a late cleanup of one attempt can never
        # delete the next one's key): the winning attempt's token is the lock's token.
        attempt = self._attempt
        if attempt is not None and attempt[0] == token:
            token = attempt[1]
        self._attempt = None
        super()._took(token, fence, started, in_loop=in_loop)

    def _validity_of(self, seconds: float) -> float:
        # A majority's grant (or renewal) of ``seconds`` may be trusted for seconds - drift.
        return seconds - clock_drift(seconds)

    # -- hooks: acquire ---------------------------------------------------------------
    def _acquire_call(self, base_token: str) -> tuple[str, Operation, float]:
        """(attempt token, its acquire operation, jitter to sleep first), built in the caller."""
        previous = self._attempt
        jitter = previous[2] if previous is not None and previous[0] == base_token else 0.0
        token = new_token()
        self._attempt = (base_token, token, 0.0)
        return token, self.ops.acquire(token), jitter

    def _do_acquire(self, token: str, waited_ms: int) -> Attempt:
        attempt, op, jitter = self._acquire_call(token)
        future = background().submit(self._try_acquire(token, attempt, op, jitter))
        try:
            return future.result()
        except BaseException:
            if not future.done():  # interrupted (KeyboardInterrupt...): undo it when it ends
                future.add_done_callback(self._cleanup_when_done(attempt))
            raise

    def _cleanup_when_done(self, attempt: str) -> Callable[[Any], None]:
        def callback(future: Any) -> None:
            runner = background()
            asyncio.run_coroutine_threadsafe(self._cleanup(attempt), runner.loop)

        return callback

    async def _ado_acquire(self, token: str, waited_ms: int) -> Attempt:
        attempt, op, jitter = self._acquire_call(token)
        return await self._try_acquire(token, attempt, op, jitter)

    async def _try_acquire(
        self, base_token: str, token: str, op: Operation, jitter: float
    ) -> Attempt:
        if jitter > 0:
            await asyncio.sleep(jitter)
        quorum, total = self.quorum, len(self.connections)

        def enough(results: dict[str, Any]) -> bool:
            granted = sum(1 for r in results.values() if _granted(r))
            return granted >= quorum or len(results) - granted > total - quorum

        started = clock.now()
        results, tasks = await scatter(
            self.connections, script_op(op), self._deadlines,
            self._inflight, enough,
        )  # fmt: skip
        grants = {alias: int(r[1]) for alias, r in results.items() if _granted(r)}
        fence = 0
        if len(grants) >= quorum:
            written = True
            if self.fencing:
                fence = max(grants.values())
                written = await self._write_back(token, fence, grants)
            if written and clock.now() - started < self.validity:
                return Granted(fence)
            acquire_logger.debug(
                "Redlock %r: majority granted but %s", self.name,
                "the fence write-back failed" if not written else "no validity left",
            )  # fmt: skip
        acquire_logger.debug(
            "Redlock %r attempt failed: %s", self.name,
            {alias: describe(r) if failed(r) else r for alias, r in results.items()},
        )  # fmt: skip
        return await self._refused(base_token, token, results, tasks, started)

    async def _refused(
        self,
        base_token: str,
        token: str,
        results: dict[str, Any],
        tasks: dict[str, asyncio.Future[Any]],
        started: float,
    ) -> Busy:
        """After a failed attempt: our token deleted everywhere; Busy, or unavailable."""
        quorum = self.quorum
        # Delete our token everywhere, each delete queued behind that node's call.
        cleanups = await self._cleanup(token, wait=False)
        answered = [alias for alias, r in results.items() if not failed(r)]
        pending = [alias for alias in self.connections if alias not in results]
        if len(answered) < quorum <= len(answered) + len(pending):
            # Not enough answers yet to tell "busy" from "unavailable": wait for them.
            await asyncio.wait({tasks[alias] for alias in pending})
            results.update((alias, outcome(tasks[alias])) for alias in pending)
            answered = [alias for alias, r in results.items() if not failed(r)]
        # The nodes that answered are cleaned before we return; the others in the background.
        if answered:
            await asyncio.wait({cleanups[alias] for alias in answered})
        if len(answered) < quorum:
            self._attempt = None
            raise self._too_few_answered(answered, results)
        held = sorted(
            int(r[1]) for r in results.values() if not failed(r) and not _granted(r) and r[1] > 0
        )
        if len(held) >= quorum:
            # A holder has a majority: wait for it.
            return Busy(held[0], None, self._majority_busy_holder(results, held[0]))
        # A split vote (or no validity left): retry soon, after a random delay so that
        # competing clients do not collide again.
        elapsed = clock.now() - started
        spread = min(max(3 * elapsed, 0.001), self.ttl / 10)
        self._attempt = (base_token, token, random.uniform(0, spread))
        return Busy(max(1, round(spread * 1000)))

    def _too_few_answered(
        self, answered: list[str], results: dict[str, Any]
    ) -> LockBackendUnavailable:
        missing = [alias for alias in self.connections if alias not in answered]
        errors = {alias: results.get(alias) for alias in missing}
        error = LockBackendUnavailable(
            f"Redlock {self.name!r}: only {len(answered)} of {len(self.connections)} nodes "
            f"answered, {self.quorum} needed; unreachable: "
            + ", ".join(f"{alias} ({describe(errors[alias])})" for alias in missing),
            lock_name=self.name,
            aliases=missing,
        )
        error.__cause__ = first_error({a: e for a, e in errors.items() if e is not None})
        return error

    def _majority_busy_holder(self, results: dict[str, Any], pttl_ms: int) -> HolderState | None:
        """The holder that refused us on a majority of the nodes (from their replies)."""
        seen: dict[str, list[HolderState]] = {}
        for result in results.values():
            if failed(result) or _granted(result):
                continue
            holder = parse_acquire(result)
            if isinstance(holder, Busy) and holder.holder is not None:
                seen.setdefault(holder.holder.token, []).append(holder.holder)
        for holders in seen.values():
            if len(holders) >= self.quorum:
                return holders[0]._replace(pttl_ms=pttl_ms)
        return None

    async def _write_back(self, token: str, fence: int, grants: dict[str, int]) -> bool:
        """Make counter >= fence hold on a majority of nodes where our token holds."""
        lagging = [alias for alias, counter in grants.items() if counter < fence]
        need = self.quorum - (len(grants) - len(lagging))
        if not lagging:
            return need <= 0
        op = script_op(self.ops.fence_raise(token, fence))
        if need <= 0:
            # Already held on a majority: raise the others too, without waiting.
            await scatter(lagging, op, self._deadlines, self._inflight, lambda r: True)
            return True

        def enough(results: dict[str, Any]) -> bool:
            ok = count(results, 1)
            return ok >= need or len(results) - ok > len(lagging) - need

        results, _ = await scatter(lagging, op, self._deadlines, self._inflight, enough)
        return count(results, 1) >= need

    async def _cleanup(self, token: str, *, wait: bool = True) -> dict[str, asyncio.Future[Any]]:
        """Compare-and-delete ``token`` on every node; with ``wait``, until all answered."""
        op = script_op(self.ops.release(token))
        enough = None if wait else (lambda results: True)
        _, tasks = await scatter(self.connections, op, self._deadlines, self._inflight, enough)
        for alias, task in tasks.items():
            task.add_done_callback(self._log_cleanup_failure(alias))
        return tasks

    def _log_cleanup_failure(self, alias: str) -> Callable[[asyncio.Future[Any]], None]:
        def callback(task: asyncio.Future[Any]) -> None:
            result = None if task.cancelled() else task.result()
            if result is None or failed(result):
                acquire_logger.info(
                    "Redlock %r: could not clean up on %s (%s); the key expires in %.3fs",
                    self.name, alias, describe(result), self.ttl,
                )  # fmt: skip

        return callback

    def _attempt_token(self, base_token: str) -> str:
        attempt = self._attempt
        if attempt is not None and attempt[0] == base_token:
            return attempt[1]
        return base_token

    def _do_cleanup(self, token: str) -> None:
        run_sync(self._cleanup(self._attempt_token(token)))

    async def _ado_cleanup(self, token: str) -> None:
        await self._cleanup(self._attempt_token(token))

    # -- hooks: release and extend -----------------------------------------------------
    def _forget(self) -> None:
        # Read before the state goes: a release within validity is judged by _release.
        self._releasing_valid = self.token is not None and not self.lost
        super()._forget()

    async def _release(self, token: str) -> bool:
        """True when released: on a majority, or, within validity, unless a majority
        of the nodes says another holder (or nobody) has the key.

        Within validity the lock was ours on a majority; a node that did not answer
        keeps our key until its TTL, and one that reports "not ours" never had it (or
        lost it alone): neither makes the holder a non-owner. Past validity a
        majority has to confirm the release.
        """
        valid, self._releasing_valid = self._releasing_valid, False
        released, results = await release_on(
            self.connections, self.ops.release(token), self._deadlines, self._inflight, self.quorum
        )
        if released >= self.quorum:
            return True
        self._raise_if_too_few(results, "release")
        if not valid or count(results, 0) >= self.quorum:
            return False
        silent = [a for a in self.connections if a not in results or failed(results[a])]
        refused = [a for a in self.connections if a in results and results[a] == 0]
        logger.warning(
            "Redlock %r released on %d of %d nodes within its validity; not ours on %s; "
            "no answer from %s, where our key stays until its TTL (%.3fs at most)",
            self.name, released, len(self.connections), refused or "none",
            [f"{a} ({describe(results.get(a))})" for a in silent] or "none", self.ttl,
        )  # fmt: skip
        return True

    def _raise_if_too_few(self, results: dict[str, Any], action: str) -> None:
        self._nodes.raise_if_too_few(results, action)

    def _do_release(self, token: str) -> bool:
        return bool(run_sync(self._release(token)))

    async def _ado_release(self, token: str) -> bool:
        return await self._release(token)

    def _backend_error(self, exc: BaseException) -> RedisLockError:
        if isinstance(exc, RedisLockError):
            return exc
        if isinstance(exc, UNREACHABLE):
            return LockBackendUnavailable(
                f"Redlock {self.name!r}: Redis unavailable: {exc}",
                lock_name=self.name,
                aliases=self.connections,
            )
        return RedisLockError(f"Redlock {self.name!r}: Redis refused a command: {exc}")

    def _do_unclaim(self, token: str) -> None:
        """Nothing to drop: Redlock waiters take turns by retrying, without claims."""

    async def _ado_unclaim(self, token: str) -> None:
        """Nothing to drop (see :meth:`_do_unclaim`)."""

    def _do_holder_fence(self, token: str) -> int | None:
        raise NotImplementedError("Redlock cannot adopt a lock (yet: engine step 4)")

    async def _ado_holder_fence(self, token: str) -> int | None:
        return self._do_holder_fence(token)  # raises, as the sync hook does

    def _wake_alias(self) -> str | None:
        # Every node publishes on release; one subscription (the first node) is enough,
        # and waits stay bounded by the holder's TTL if that node is down.
        return self.connections[0] if get_config()["PUBSUB_WAKEUP"] else None

    # -- queries (majority semantics) ---------------------------------------------------
    async def _state(self) -> dict[str, tuple[str | None, int]]:
        return await self._nodes.holders(self.key)

    def _majority_holder(self, state: dict[str, tuple[str | None, int]]) -> tuple[str, int] | None:
        return majority_holder(state, self.quorum)

    def _owned_in(self, state: dict[str, tuple[str | None, int]]) -> bool:
        holder = self._majority_holder(state)
        return holder is not None and holder[0] == self.token and not self.lost

    def _may_own(self) -> bool:
        return self.token is not None and self._owner_pid == os.getpid()

    def locked(self) -> bool:
        """True if one token holds the lock on a majority of the nodes."""
        return self._majority_holder(run_sync(self._state())) is not None

    def owned(self) -> bool:
        """True if this object's token holds a majority and its validity has not run out."""
        return self._may_own() and self._owned_in(run_sync(self._state()))

    def remaining(self) -> float | None:
        """Seconds until fewer than a majority of nodes hold the lock, or ``None`` if free.

        Raw TTL, without the clock-drift margin (see ``valid_until`` for that).
        """
        return _seconds(self._majority_holder(run_sync(self._state())))

    async def alocked(self) -> bool:
        """Async twin of :meth:`locked`."""
        return self._majority_holder(await self._state()) is not None

    async def aowned(self) -> bool:
        """Async twin of :meth:`owned`."""
        return self._may_own() and self._owned_in(await self._state())

    async def aremaining(self) -> float | None:
        """Async twin of :meth:`remaining`."""
        return _seconds(self._majority_holder(await self._state()))

    def __repr__(self) -> str:
        state = "held" if self.token else "not held"
        return f"<Redlock {self.name!r} on {len(self.connections)} nodes {state}>"


def _granted(result: Any) -> bool:
    return not failed(result) and int(result[0]) == 1


def _seconds(holder: tuple[str, int] | None) -> float | None:
    if holder is None or holder[1] < 0:
        return None
    return holder[1] / 1000


__all__ = ["Redlock", "clock_drift", "connect_budget", "default_node_timeout"]
