"""Who holds a lock and who waits for it: ``LockInfo``, its holders and waiters, and the
reads that fill them (any kind, through the registry). :mod:`.inspection` builds listing
and force-release on it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any

from . import drivers, registry
from .conf import get_config
from .exceptions import LockBackendUnavailable, RedisLockError
from .holder import parse_holder
from .kinds import Holders, HolderState, Operation
from .kinds.holders import WaiterState, key_type
from .steps import Send, Step
from .transports.base import is_unreachable
from .transports.single import SingleNode


@dataclass(frozen=True)
class LockOwner:
    """Where the holder runs."""

    host: str
    pid: int | None
    thread: str

    def __str__(self) -> str:
        pid = "?" if self.pid is None else self.pid
        return f"{self.host}:{pid}/{self.thread}" if self.thread else f"{self.host}:{pid}"


@dataclass(frozen=True)
class LockHolder:
    """One holder of a lock: a mutex has one, a semaphore one per permit held."""

    host: str
    pid: int | None
    thread: str
    #: What the holder guards: a view's dotted path, ``manage.py <command>``, a function.
    purpose: str
    acquired_at: dt.datetime | None
    #: Seconds of TTL left on this holder's lease (``None``: no TTL, which ours never lack).
    ttl: float | None
    fence: int | None
    watchdog: bool
    #: The holder's token: what a token-checked force-release needs. Treat as a secret.
    token: str

    @property
    def owner(self) -> LockOwner:
        """Where the holder runs."""
        return LockOwner(self.host, self.pid, self.thread)

    @property
    def short_token(self) -> str:
        """The first characters of the token: enough to tell holders apart."""
        return self.token[:6] + "…"


@dataclass(frozen=True)
class LockWaiter:
    """One waiter for a lock, as its kind's line records it."""

    host: str
    pid: int | None
    thread: str
    #: What it would guard: a view's dotted path, ``manage.py <command>``, a function.
    purpose: str
    #: The kind it waits as: the lock's, or ``"read"`` / ``"write"`` for a read-write lock.
    kind: str
    #: When it began to wait (aware, UTC): by its own clock for a ``Lock``'s waiter, by
    #: the server's for a semaphore's or read-write lock's.
    waiting_since: dt.datetime
    #: The first characters of its token: enough to tell waiters apart.
    short_token: str

    @property
    def owner(self) -> LockOwner:
        """Where the waiter runs."""
        return LockOwner(self.host, self.pid, self.thread)


@dataclass(frozen=True)
class LockInfo:
    """One held lock, as read from Redis.

    ``holders`` lists every holder (one for a mutex, one per permit for a semaphore);
    the single-holder fields (``owner``, ``purpose``, ``ttl``, ``fence``, ``token``...)
    describe the first of them, the one that has held longest.
    """

    name: str
    key: str
    #: Seconds of TTL left (``None`` if the key has no TTL, which our locks never do).
    ttl: float | None
    owner: LockOwner
    #: What the lock guards: a view's dotted path, ``manage.py <command>``, a function.
    purpose: str
    acquired_at: dt.datetime | None
    fence: int | None
    watchdog: bool
    connection: str
    #: The holder's token: what a token-checked force-release needs. Treat as a secret.
    token: str
    #: The kind's name in the registry: ``"lock"``, ``"semaphore"``...
    kind: str = "lock"
    #: Every holder, longest-held first.
    holders: tuple[LockHolder, ...] = ()
    #: How many holders the kind allows at once, when it says (semaphores); else ``None``.
    limit: int | None = None
    #: Who waits for it, longest waiting first.
    waiters: tuple[LockWaiter, ...] = ()

    @property
    def waiting(self) -> int:
        """How many wait for it."""
        return len(self.waiters)

    @property
    def term(self) -> int | None:
        """An election's term (its leader's fence); ``None`` for every other kind."""
        return self.fence if self.kind == "election" else None

    @property
    def kind_text(self) -> str:
        """Its kind as shown: ``lock``, or ``election, term 7``."""
        return self.kind if self.term is None else f"{self.kind}, term {self.term}"

    @property
    def holders_text(self) -> str:
        """How many hold it: ``1``, or ``2 of 3`` where the kind has a limit."""
        count = len(self.holders)
        return str(count) if self.limit is None else f"{count} of {self.limit}"

    @property
    def short_token(self) -> str:
        """The first characters of the token: enough to tell holders apart."""
        return self.token[:6] + "…"


def holder_from_state(state: HolderState, fields: dict[str, str] | None = None) -> LockHolder:
    """A :class:`LockHolder` from a holder read by a script (``read_holder``, a busy acquire);
    ``fields``: its description already parsed (:func:`~.holder.parse_holder`)."""
    if fields is None:
        fields = parse_holder(state.description) if state.description else {}
    pid = fields.get("pid", "")
    stamp = fields.get("acquired_at", "")
    try:
        acquired = dt.datetime.fromtimestamp(float(stamp), tz=dt.timezone.utc) if stamp else None
    except ValueError:
        acquired = None
    return LockHolder(
        host=fields.get("host", ""),
        pid=int(pid) if pid.isdigit() else None,
        thread=fields.get("thread", ""),
        purpose=fields.get("purpose", ""),
        acquired_at=acquired,
        ttl=None if state.pttl_ms < 0 else state.pttl_ms / 1000,
        fence=state.fence or None,
        watchdog=fields.get("watchdog") == "1",
        token=state.token,
    )


def waiter_from_state(state: WaiterState, kind: str) -> LockWaiter:
    """A :class:`LockWaiter` from a waiter read by a kind (``kind``: the lock's, unless
    the record names the side it waits for, or its description a role: an election)."""
    fields = parse_holder(state.description) if state.description else {}
    pid = fields.get("pid", "")
    return LockWaiter(
        host=fields.get("host", ""),
        pid=int(pid) if pid.isdigit() else None,
        thread=fields.get("thread", ""),
        purpose=fields.get("purpose", ""),
        kind=state.kind or fields.get("role") or kind,
        waiting_since=dt.datetime.fromtimestamp(state.since, tz=dt.timezone.utc),
        short_token=state.token[:6] + "…",
    )


def info_from_holders(
    name: str,
    key: str,
    holders: Sequence[LockHolder],
    alias: str,
    *,
    kind: str = "lock",
    limit: int | None = None,
    waiters: Sequence[LockWaiter] = (),
) -> LockInfo:
    """A :class:`LockInfo` of ``holders`` (at least one), longest-held first."""
    first = holders[0]
    return LockInfo(
        name=name,
        key=key,
        ttl=first.ttl,
        owner=first.owner,
        purpose=first.purpose,
        acquired_at=first.acquired_at,
        fence=first.fence,
        watchdog=first.watchdog,
        connection=alias,
        token=first.token,
        kind=kind,
        holders=tuple(holders),
        limit=limit,
        waiters=tuple(waiters),
    )


def info_from_state(name: str, key: str, state: HolderState, alias: str) -> LockInfo:
    """A :class:`LockInfo` of a mutex from its holder as read by a script."""
    return info_from_holders(name, key, [holder_from_state(state)], alias)


def _alias(connection: str | None) -> str:
    return get_config()["CONNECTION"] if connection is None else connection


def _unavailable(alias: str, name: str | None, exc: BaseException) -> RedisLockError:
    if is_unreachable(exc):
        return LockBackendUnavailable(
            f"Redis of connection {alias!r} is unavailable: {exc}", lock_name=name, aliases=[alias]
        )
    return RedisLockError(f"Redis of connection {alias!r} refused a command: {exc}", lock_name=name)


def lock_info(name: str, *, connection: str | None = None) -> LockInfo | None:
    """What Redis says about lock ``name`` right now, or ``None`` if nobody holds it."""
    return drivers.run(read_info(name, connection))


async def alock_info(name: str, *, connection: str | None = None) -> LockInfo | None:
    """Async twin of :func:`lock_info`."""
    return await drivers.arun(read_info(name, connection))


def reads_of(kind: Any, keys: Any) -> list[Operation]:
    """The reads of one lock of ``kind``: its holders, and its waiters when the kind can
    say (``read_waiters``); sent together, in one round trip."""
    ops = kind.operations(keys)
    read_waiters = getattr(ops, "read_waiters", None)
    reads = [ops.read_holders()]
    if read_waiters is not None:
        reads.append(read_waiters())
    return reads


def read_info(name: str, connection: str | None) -> Generator[Step, Any, LockInfo | None]:
    """:func:`lock_info` as steps, for either driver: the name's kind (its key's Redis
    type) and the default kind's holders and waiters in one round trip; another kind's
    in a second one."""
    default = registry.kind()
    keys = default.keys(name)
    alias = _alias(connection)
    node = SingleNode(alias)
    reads = [key_type(keys.key), *reads_of(default, keys)]
    found, *replies = yield Send(node, "call_many", (reads,))
    if isinstance(found, Exception):
        raise _unavailable(alias, name, found) from found
    kind = registry.kind_of_type(found)
    if kind is None:  # not held (or a key of no kind of ours)
        return None
    if kind is not default:
        replies = yield Send(node, "call_many", (reads_of(kind, keys),))
    for reply in replies:
        if isinstance(reply, Exception):
            raise _unavailable(alias, name, reply) from reply
    holders, waiters = replies[0], (replies[1] if len(replies) > 1 else ())
    return info_of(name, keys.key, kind.name, holders, alias, waiters)


def info_of(
    name: str,
    key: str,
    kind: str,
    holders: Holders,
    alias: str,
    waiters: Sequence[WaiterState] = (),
) -> LockInfo | None:
    """The :class:`LockInfo` of a kind's holder (and waiter) read, or ``None`` when
    nobody holds it."""
    if not holders.states:
        return None
    first, *others = holders.states
    fields = parse_holder(first.description) if first.description else {}
    records = [holder_from_state(first, fields), *map(holder_from_state, others)]
    # A read-write lock says whether it is read or written; an election's lease, that it
    # is one (its holder description's role).
    shown = holders.kind or fields.get("role") or kind
    waiting = sorted((waiter_from_state(w, kind) for w in waiters), key=_longest_first)
    return info_from_holders(
        name, key, records, alias, kind=shown, limit=holders.limit, waiters=waiting
    )


def _longest_first(waiter: LockWaiter) -> tuple[dt.datetime, str]:
    return waiter.waiting_since, waiter.short_token


__all__ = [
    "LockHolder",
    "LockInfo",
    "LockOwner",
    "LockWaiter",
    "alock_info",
    "holder_from_state",
    "info_from_holders",
    "info_from_state",
    "info_of",
    "lock_info",
    "read_info",
    "reads_of",
    "waiter_from_state",
]
