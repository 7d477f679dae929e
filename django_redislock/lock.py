"""The single-node distributed lock: ``Lock`` is the mutex kind
(:mod:`django_redislock.kinds.mutex`) over the single-node transport, or over the
replicated one (``WAIT``) with ``wait_replicas`` (:mod:`django_redislock.transports`).

``Lock`` = ``SET key token NX PX ttl`` (plus fence and holder metadata, one Lua
call) to acquire, compare-token-then-delete (Lua) to release. Everything else a
lock does is :class:`~django_redislock.base.BaseLock`'s, shared with Redlock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from redis.exceptions import RedisError

from . import drivers, leases, protocol
from .attempts import CLAIM_MS, MAX_SUBSCRIBED_WAIT
from .base import (
    UNREACHABLE,
    BaseLock,
    acquire_logger,
    clock,
    is_unreachable,
    new_token,
    release_logger,
)
from .conf import get_config
from .connection import async_lock_client, lock_client
from .exceptions import (
    LockBackendUnavailable,
    RedisLockError,
)
from .holder import held_token
from .keys import validate_seconds
from .kinds.interface import KindOperations
from .kinds.mutex import Attempt, Busy, Granted, Mutex, parse_acquire
from .transports.replicated import Replicated
from .transports.single import SingleNode


class Lock(BaseLock):
    """A distributed lock on one Redis server (a django-redis cache alias).

    See the README and ``docs/locks.md``; the signature is the public contract.
    """

    #: The kind this class runs on one server (a subclass may run another: see
    #: docs/architecture.md, "Adding a lock kind").
    operations: type[KindOperations] = Mutex

    def __init__(
        self,
        name: str,
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        blocking: bool = True,
        watchdog: bool | None = None,
        connection: str | None = None,
        fencing: bool = True,
        purpose: str | None = None,
        on_lost: Callable[[Any], Any] | None = None,
        max_hold: float | None = None,
        metrics_name: str | None = None,
        wait_replicas: int = 0,
        wait_timeout: float | None = None,
        reentrant: bool | None = None,
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
        alias = get_config()["CONNECTION"] if connection is None else connection
        if not isinstance(alias, str) or not alias:
            raise ValueError(f"connection must be a cache alias (str), not {alias!r}")
        self.connection = alias
        self.reentrant = _flag(get_config()["REENTRANT"] if reentrant is None else reentrant)
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int):
            raise ValueError(f"wait_replicas must be an int >= 0, not {wait_replicas!r}")
        if wait_replicas < 0:
            raise ValueError(f"wait_replicas must be >= 0, not {wait_replicas!r}")
        self.wait_replicas = wait_replicas
        self.wait_timeout = (
            None
            if wait_timeout is None
            else validate_seconds(wait_timeout, "wait_timeout", allow_zero=False)
        )
        # No claims (so no hand-over) when every holder must WAIT for replicas.
        self.ops = self.operations.of(self, claim_ms=None if wait_replicas else CLAIM_MS)
        self.transport = (
            Replicated(alias, wait_replicas, self.wait_timeout, self.ttl)
            if wait_replicas
            else SingleNode(alias)
        )

    def _wake_alias(self) -> str | None:
        return self.connection if get_config()["PUBSUB_WAKEUP"] else None

    def _backend_error(self, exc: BaseException) -> RedisLockError:
        if is_unreachable(exc):
            return LockBackendUnavailable(
                f"Redis for lock {self.name!r} (connection {self.connection!r}) is unavailable: "
                f"{exc}",
                lock_name=self.name,
                aliases=[self.connection],
            )
        return RedisLockError(
            f"Redis refused a command for lock {self.name!r} (connection "
            f"{self.connection!r}): {exc}",
            lock_name=self.name,
        )

    def _client(self) -> Any:
        return lock_client(self.connection)

    # -- queries ----------------------------------------------------------------
    def locked(self) -> bool:
        """True if anyone holds the lock."""
        return bool(self._query(lambda c: c.exists(self.key)))

    def owned(self) -> bool:
        """True if this object holds the lock right now (checked in Redis)."""
        if not self._may_own():
            return False
        value = self._query(lambda c: c.get(self.key))
        return value is not None and held_token(value.decode()) == self.token

    def remaining(self) -> float | None:
        """Seconds of TTL the lock has left, or ``None`` when nobody holds it."""
        return _pttl_seconds(self._query(lambda c: c.pttl(self.key)))

    def _query(self, call: Callable[[Any], Any]) -> Any:
        try:
            return call(self._client())
        except RedisError as exc:
            raise drivers.run(protocol.refused(self, exc)) from exc

    async def _aquery(self, *command: Any) -> Any:
        # On a connection the library holds: a cancelled caller leaves none half-read.
        try:
            client = await async_lock_client(self.connection)
            return await leases.call(client, leases.CommandOp(*command))
        except RedisError as exc:
            raise await drivers.arun(protocol.refused(self, exc)) from exc

    async def alocked(self) -> bool:
        """Async twin of :meth:`locked`."""
        return bool(await self._aquery("EXISTS", self.key))

    async def aowned(self) -> bool:
        """Async twin of :meth:`owned`."""
        if not self._may_own():
            return False
        value = await self._aquery("GET", self.key)
        return value is not None and held_token(value.decode()) == self.token

    async def aremaining(self) -> float | None:
        """Async twin of :meth:`remaining`."""
        return _pttl_seconds(await self._aquery("PTTL", self.key))


def _flag(reentrant: object) -> bool:
    if not isinstance(reentrant, bool):
        raise ValueError(f"reentrant must be True or False, not {reentrant!r}")
    return reentrant


def _pttl_seconds(pttl: int) -> float | None:
    return None if pttl is None or pttl < 0 else pttl / 1000


__all__ = [
    "CLAIM_MS",
    "MAX_SUBSCRIBED_WAIT",
    "UNREACHABLE",
    "Attempt",
    "BaseLock",
    "Busy",
    "Granted",
    "Lock",
    "acquire_logger",
    "clock",
    "is_unreachable",
    "new_token",
    "parse_acquire",
    "release_logger",
]
