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

from collections.abc import Callable, Sequence
from typing import Any

from .base import UNREACHABLE, BaseLock
from .conf import get_config
from .exceptions import LockBackendUnavailable, RedisLockError
from .keys import validate_seconds
from .kinds import Mutex
from .kinds.holders import key_type
from .transports.base import WrongKind
from .transports.drift import clock_drift, minimum_ttl, validity_of
from .transports.nodes import (
    Deadlines,
    majority_holder,
    validate_connections,
)
from .transports.quorum import Quorum
from .transports.single import SingleNode

#: Default per-node timeout: this fraction of the TTL, clamped to the bounds below.
NODE_TIMEOUT_FRACTION = 0.1
NODE_TIMEOUT_MIN = 0.05
NODE_TIMEOUT_MAX = 0.25


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

    transport: Quorum

    _event_kind = "redlock"

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
        metrics_name: str | None = None,
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
            metrics_name=metrics_name,
        )
        if self.ttl < minimum_ttl():
            raise ValueError(
                f"Redlock ttl={self.ttl:g}s is within its clock-drift allowance "
                f"({clock_drift(self.ttl) * 1000:.2f} ms: 1 % of the TTL + 2 ms), so no "
                f"majority's grant could ever be valid; the minimum is {minimum_ttl():g}s "
                "(and in practice many times the round trip to the nodes)."
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
        self.transport = Quorum(self.name, self.connections, self._deadlines, self.ops)

    def _forget(self) -> None:
        # The release that follows is judged by whether the lock was still valid.
        if self.token is not None:
            self.transport.releasing_valid[self.token] = not self.lost
        super()._forget()

    def _validity_of(self, seconds: float) -> float:
        # A majority's grant (or renewal) of ``seconds`` may be trusted for seconds - drift.
        return validity_of(seconds)

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

    def _do_key_type(self, exc: BaseException) -> str:
        """The Redis type of the lock's key on the node that reported ``WRONGTYPE``."""
        found: str = SingleNode(self._wrong_node(exc)).call(key_type(self.key))
        return found

    async def _ado_key_type(self, exc: BaseException) -> str:
        found: str = await SingleNode(self._wrong_node(exc)).acall(key_type(self.key))
        return found

    def _wrong_node(self, exc: BaseException) -> str:
        return exc.alias if isinstance(exc, WrongKind) else self.connections[0]

    def _do_unclaim(self, token: str) -> None:
        """Nothing to drop: Redlock waiters take turns by retrying, without claims."""

    async def _ado_unclaim(self, token: str) -> None:
        """Nothing to drop (see :meth:`_do_unclaim`)."""

    def _wake_alias(self) -> str | None:
        # Every node publishes on release; one subscription (the first node) is enough,
        # and waits stay bounded by the holder's TTL if that node is down.
        return self.connections[0] if get_config()["PUBSUB_WAKEUP"] else None

    # -- queries (majority semantics) ---------------------------------------------------
    def _majority_holder(self, state: dict[str, tuple[str | None, int]]) -> tuple[str, int] | None:
        return majority_holder(state, self.quorum)

    def _owned_in(self, state: dict[str, tuple[str | None, int]]) -> bool:
        holder = self._majority_holder(state)
        return holder is not None and holder[0] == self.token and not self.lost

    def locked(self) -> bool:
        """True if one token holds the lock on a majority of the nodes."""
        return self._majority_holder(self.transport.holders_of(self.key)) is not None

    def owned(self) -> bool:
        """True if this object's token holds a majority and its validity has not run out."""
        return self._may_own() and self._owned_in(self.transport.holders_of(self.key))

    def remaining(self) -> float | None:
        """Seconds until fewer than a majority of nodes hold the lock, or ``None`` if free.

        Raw TTL, without the clock-drift margin (see ``valid_until`` for that).
        """
        return _seconds(self._majority_holder(self.transport.holders_of(self.key)))

    async def alocked(self) -> bool:
        """Async twin of :meth:`locked`."""
        return self._majority_holder(await self.transport.aholders_of(self.key)) is not None

    async def aowned(self) -> bool:
        """Async twin of :meth:`owned`."""
        return self._may_own() and self._owned_in(await self.transport.aholders_of(self.key))

    async def aremaining(self) -> float | None:
        """Async twin of :meth:`remaining`."""
        return _seconds(self._majority_holder(await self.transport.aholders_of(self.key)))

    def __repr__(self) -> str:
        state = "held" if self.token else "not held"
        return f"<Redlock {self.name!r} on {len(self.connections)} nodes {state}>"


def _seconds(holder: tuple[str, int] | None) -> float | None:
    if holder is None or holder[1] < 0:
        return None
    return holder[1] / 1000


__all__ = ["Redlock", "clock_drift", "connect_budget", "default_node_timeout"]
