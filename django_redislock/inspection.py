"""Looking at held locks from outside: what the admin page and the command use. Listing
and force-release here; who holds one lock (``LockInfo``, ``lock_info``) in :mod:`.info`,
whose names this module also offers."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from . import events, registry
from .conf import get_config
from .connection import lock_client
from .info import (
    LockHolder,
    LockInfo,
    LockOwner,
    LockWaiter,
    _alias,
    _unavailable,
    alock_info,
    holder_from_state,
    info_from_holders,
    info_from_state,
    info_of,
    lock_info,
    read_info,
    reads_of,
)
from .keys import LockKeys, name_from_key, validate_prefix
from .kinds import Operation
from .kinds.holders import key_type
from .kinds.operation import text
from .transports import wire
from .transports.single import SingleNode

# -- force-release ------------------------------------------------------------

#: :attr:`ReleaseResult.status` values.
RELEASED = "released"
NOT_HELD = "not_held"
CHANGED_HANDS = "changed_hands"

# Without a token, force-release reads the holder and then deletes it only if
# that same holder still holds it, so the holder it reports is the one it
# removed. If the lock changes hands in between that many times in a row, it
# gives up on knowing and deletes whoever holds it.
_FORCE_RELEASE_ATTEMPTS = 5


@dataclass(frozen=True)
class ReleaseResult:
    """What :func:`force_release_holder` did.

    ``status`` is :data:`RELEASED`, :data:`NOT_HELD` or :data:`CHANGED_HANDS`.
    ``info`` is the holder that was removed (released), or the holder found
    instead of the expected one (changed hands; ``None`` if it expired too).
    """

    name: str
    status: str
    info: LockInfo | None

    @property
    def released(self) -> bool:
        return self.status == RELEASED

    def __bool__(self) -> bool:
        return self.released


def force_release_holder(
    name: str, *, token: str | None = None, connection: str | None = None, user: Any = None
) -> ReleaseResult:
    """Like :func:`force_release`, but says what happened and whom it removed.

    With ``token``, only the holder with that token is removed; ``CHANGED_HANDS``
    means it holds the lock no more while others (``info``) do, and they were left alone.
    """
    alias = _alias(connection)
    if token is not None and not token:
        raise ValueError("token must be a non-empty str, or None for whoever holds the lock")
    for attempt in range(_FORCE_RELEASE_ATTEMPTS + 1):
        info = lock_info(name, connection=connection)
        if info is None:
            return ReleaseResult(name, NOT_HELD, None)
        targets = [h for h in info.holders if token is None or h.token == token]
        if not targets:
            return ReleaseResult(name, CHANGED_HANDS, info)
        kind = registry.kind(info.kind)
        ops = kind.operations(kind.keys(name))
        if attempt == _FORCE_RELEASE_ATTEMPTS and token is None:
            # It kept changing hands between our reads and deletes: delete whoever holds it.
            done = _call(alias, name, ops.force_release(""))
            removed = None
        else:
            results = [_call(alias, name, ops.force_release(h.token)) for h in targets]
            done = 1 if 1 in results else (-1 if -1 in results else 0)
            removed = [h for h, result in zip(targets, results, strict=True) if result == 1]
        if done == 1:
            gone = info_from_holders(
                name, info.key, removed, alias, kind=info.kind, limit=info.limit
            ) if removed else None  # fmt: skip
            events.emit(
                events.LockEvent(
                    events.FORCE_RELEASED,
                    info.kind,
                    name,
                    holder=gone,
                    connection=alias,
                    user=user,
                    lock_class=kind.lock_class(),
                )
            )
            return ReleaseResult(name, RELEASED, gone)
        if done == 0:  # expired between the read and the delete
            return ReleaseResult(name, NOT_HELD, None)
        if token is not None:
            return ReleaseResult(name, CHANGED_HANDS, lock_info(name, connection=connection))
        # Changed hands between our read and the delete: read the new holders.
    return ReleaseResult(name, NOT_HELD, None)  # pragma: no cover - the last try is unconditional


def _call(alias: str, name: str, op: Operation) -> Any:
    try:
        return SingleNode(alias).call(op)
    except RedisError as exc:
        raise _unavailable(alias, name, exc) from exc


def force_release(
    name: str, *, token: str | None = None, connection: str | None = None, user: Any = None
) -> bool:
    """Delete lock ``name`` whoever holds it, and wake its waiters.

    With ``token``, delete it only if that holder still holds it (so a lock that
    changed hands since you looked is left alone). Returns True when a lock was
    deleted. The fence counter is kept, so the next holder's fence is higher.
    Sends ``lock_force_released`` with the :class:`LockInfo` of the holder removed.
    """
    return force_release_holder(name, token=token, connection=connection, user=user).released


# -- listing ----------------------------------------------------------------

#: Characters with a meaning in a Redis glob pattern (``SCAN MATCH``).
_GLOB_SPECIAL = frozenset("\\*?[]")
# SCAN COUNT bounds. COUNT is how many hash-table slots one SCAN call visits:
# small keeps each call short on the server, large saves round trips when few
# keys match (a pattern search among a million cache keys).
MIN_SCAN_COUNT = 100
MAX_SCAN_COUNT = 5_000
# Lock keys wanted from one SCAN call while iterating held_locks().
_BATCH_TARGET = 250


def glob_escape(text: str) -> str:
    """``text`` as a Redis glob pattern that matches exactly ``text``."""
    return "".join("\\" + ch if ch in _GLOB_SPECIAL else ch for ch in text)


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` uses glob syntax (``*``, ``?``, a ``[...]`` class)."""
    return "*" in pattern or "?" in pattern or re.search(r"\[[^\]]+\]", pattern) is not None


def search_pattern(query: str) -> str:
    """The name pattern for a search box: a glob as is, else "names containing it"."""
    query = query.strip()
    if not query:
        return "*"
    return query if is_glob(query) else f"*{glob_escape(query)}*"


def lock_key_pattern(pattern: str = "*") -> str:
    """The ``SCAN MATCH`` pattern of lock keys whose names match glob ``pattern``.

    Only lock keys ``P:{N}`` match: companion keys (``P:{N}:meta``,
    ``P:{N}:fence``) do not end with ``}``. The prefix is escaped, so a prefix
    with glob characters matches literally.
    """
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"pattern must be a non-empty glob str, not {pattern!r}")
    if "{" in pattern or "}" in pattern:
        raise ValueError(f"Lock names never contain '{{' or '}}'; bad pattern {pattern!r}")
    prefix = validate_prefix(get_config()["KEY_PREFIX"])
    return f"{glob_escape(prefix)}:{{{pattern}}}"


def _nodes(client: Any) -> list[Any]:
    """The clients to scan: every primary of a cluster, else the client itself."""
    get_primaries = getattr(client, "get_primaries", None)
    if get_primaries is None:
        return [client]
    nodes = []
    for node in get_primaries():
        conn = getattr(node, "redis_connection", None)
        nodes.append(conn if conn is not None else client.get_redis_connection(node))
    return nodes


def _next_count(count: int, found: int, wanted: int) -> int:
    """Adapt SCAN COUNT so the next call returns about ``wanted`` lock keys."""
    if found <= 0:
        return min(MAX_SCAN_COUNT, count * 4)
    guess = count * wanted // found
    return max(MIN_SCAN_COUNT, min(MAX_SCAN_COUNT, guess, count * 4))


def _read_batch(client: Any, raw_keys: list[Any], alias: str) -> list[LockInfo]:
    """The holders and waiters of a batch of lock keys: each key's kind and the default
    kind's reads in one round trip; the reads of other kinds' locks in a second one."""
    default = registry.kind()
    prefix = get_config()["KEY_PREFIX"]
    found: list[tuple[str, LockKeys]] = []
    for raw in raw_keys:
        name = name_from_key(prefix, text(raw))
        if name is not None:
            found.append((name, default.keys(name)))
    if not found:
        return []
    per_lock = [reads_of(default, keys) for _, keys in found]
    ops = [op for _, keys in found for op in (key_type(keys.key),)]
    reads = [op for reads in per_lock for op in reads]
    replies = wire.run_batch(client, ops + reads)
    kinds = [registry.kind_of_type(text(_raised(reply))) for reply in replies[: len(ops)]]
    parsed: list[list[Any] | None] = []
    at = len(ops)
    for kind, lock_reads in zip(kinds, per_lock, strict=True):
        mine = replies[at : at + len(lock_reads)]
        at += len(lock_reads)
        parsed.append(
            [op.parse(_raised(r)) for op, r in zip(lock_reads, mine, strict=True)]
            if kind is default
            else None
        )
    others = [i for i, kind in enumerate(kinds) if kind is not None and kind is not default]
    if others:
        other_reads = [reads_of(kinds[i], found[i][1]) for i in others]
        flat = [op for reads in other_reads for op in reads]
        other_replies = iter(wire.run_batch(client, flat))
        for i, lock_reads in zip(others, other_reads, strict=True):
            parsed[i] = [op.parse(_raised(next(other_replies))) for op in lock_reads]
    infos = []
    for (name, keys), kind, read in zip(found, kinds, parsed, strict=True):
        if kind is None or read is None:
            continue
        waiters = read[1] if len(read) > 1 else ()
        info = info_of(name, keys.key, kind.name, read[0], alias, waiters)
        if info is not None:  # expired or released since the SCAN
            infos.append(info)
    return infos


def _raised(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


def held_locks(
    pattern: str = "*", *, connection: str | None = None, count: int | None = None
) -> Iterator[LockInfo]:
    """Every held lock whose name matches the glob ``pattern``, read live.

    Scans with ``SCAN MATCH`` (never ``KEYS``) on every primary, and reads each
    batch's tokens, TTLs and metadata in one pipelined round trip. ``count`` is
    the ``SCAN COUNT`` hint; by default it adapts to how many keys match. A lock
    taken or released during the scan may or may not be listed (SCAN's
    guarantee: a lock held throughout is listed, at most a few times twice).
    Use :func:`glob_escape` to match a name that contains ``*?[]\\`` literally.
    """
    match = lock_key_pattern(pattern)
    alias = _alias(connection)
    fixed = count is not None
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise ValueError(f"count must be a positive int, not {count!r}")
    try:
        nodes = _nodes(lock_client(alias))
    except RedisError as exc:
        raise _unavailable(alias, None, exc) from exc
    for client in nodes:
        cursor = 0
        step: int = MIN_SCAN_COUNT if count is None else count
        while True:
            try:
                cursor, raw_keys = client.scan(cursor=cursor, match=match, count=step)
                infos = _read_batch(client, raw_keys, alias)
            except RedisError as exc:
                raise _unavailable(alias, None, exc) from exc
            yield from infos
            if not cursor:
                break
            if not fixed:
                step = _next_count(step, len(raw_keys), _BATCH_TARGET)


def _parse_cursor(cursor: str | int | None, nodes: int) -> tuple[int, int]:
    if cursor is None or cursor == "" or cursor == 0:
        return 0, 0
    text = str(cursor)
    node, _, position = text.rpartition("-")
    try:
        index, value = (int(node) if node else 0), int(position)
    except ValueError:
        raise ValueError(f"Not a held-locks cursor: {cursor!r}") from None
    if not (0 <= index < nodes) or value < 0:
        raise ValueError(f"Not a held-locks cursor: {cursor!r}")
    return index, value


def _format_cursor(index: int, value: int, nodes: int) -> str:
    return str(value) if nodes == 1 else f"{index}-{value}"


def scan_page(
    pattern: str = "*",
    cursor: str | int | None = None,
    page_size: int = 100,
    connection: str | None = None,
    *,
    max_seconds: float | None = None,
) -> tuple[list[LockInfo], str | None]:
    """One page of held locks, for paging through many without loading them all.

    Starts at ``cursor`` (``None`` for the first page), SCANs until it found at
    least ``page_size`` locks or the scan ends, and returns ``(infos,
    next_cursor)``; ``next_cursor`` is ``None`` when the scan is complete. A page
    is made of whole SCAN batches, so it may hold somewhat more than
    ``page_size`` locks (SCAN COUNT adapts to keep it close). With
    ``max_seconds``, it stops early once that much time was spent, returning
    what it found so far (maybe nothing) and the cursor to continue from: a
    sparse pattern search over a huge database then never blocks a web request.
    """
    if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"page_size must be a positive int, not {page_size!r}")
    match = lock_key_pattern(pattern)
    alias = _alias(connection)
    try:
        nodes = _nodes(lock_client(alias))
    except RedisError as exc:
        raise _unavailable(alias, None, exc) from exc
    index, position = _parse_cursor(cursor, len(nodes))
    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    infos: list[LockInfo] = []
    step = max(MIN_SCAN_COUNT, min(MAX_SCAN_COUNT, page_size * 3))
    while True:
        client = nodes[index]
        try:
            position, raw_keys = client.scan(cursor=position, match=match, count=step)
            infos.extend(_read_batch(client, raw_keys, alias))
        except RedisError as exc:
            raise _unavailable(alias, None, exc) from exc
        if not position:
            index += 1
            if index == len(nodes):
                return infos, None
        if len(infos) >= page_size:
            break
        if deadline is not None and time.monotonic() >= deadline:
            break
        step = _next_count(step, len(raw_keys), page_size - len(infos))
    return infos, _format_cursor(index, position, len(nodes))


# -- who waits ----------------------------------------------------------------

#: The companion keys where a lock's waiters are recorded: a Lock's claim and line, a
#: semaphore's or read-write lock's waiting records.
_WAITED_SUFFIXES = ("}:claim", "}:line", "}:waiting:until")


def waited_locks(*, connection: str | None = None) -> list[LockInfo]:
    """Every held lock that someone waits for, with its holders and waiters, read live.

    One SCAN over the keys where waiters are recorded (``P:{N}:claim``, ``P:{N}:line``,
    ``P:{N}:waiting:until``) on every primary, then the holders and waiters of those
    locks only, in pipelined batches: cheap beside listing every held lock when few
    are waited for.
    """
    prefix = validate_prefix(get_config()["KEY_PREFIX"])
    match = f"{glob_escape(prefix)}:{{*}}:[clw]*"  # claim, line, waiting... (and leases)
    alias = _alias(connection)
    found: list[LockInfo] = []
    try:
        for client in _nodes(lock_client(alias)):
            names: dict[str, None] = {}
            cursor = 0
            while True:
                cursor, raw_keys = client.scan(cursor=cursor, match=match, count=MAX_SCAN_COUNT)
                for raw in raw_keys:
                    key = text(raw)
                    if key.endswith(_WAITED_SUFFIXES):
                        names[key[len(prefix) + 2 : key.rindex("}:")]] = None
                if not cursor:
                    break
            keys = [LockKeys.build(prefix, name).key for name in names]
            for start in range(0, len(keys), _BATCH_TARGET):
                batch = _read_batch(client, keys[start : start + _BATCH_TARGET], alias)
                found.extend(info for info in batch if info.waiters)
    except RedisError as exc:
        raise _unavailable(alias, None, exc) from exc
    return found


__all__ = [
    "CHANGED_HANDS",
    "MAX_SCAN_COUNT",
    "MIN_SCAN_COUNT",
    "NOT_HELD",
    "RELEASED",
    "LockHolder",
    "LockInfo",
    "LockOwner",
    "LockWaiter",
    "ReleaseResult",
    "alock_info",
    "force_release",
    "force_release_holder",
    "glob_escape",
    "held_locks",
    "holder_from_state",
    "info_from_holders",
    "info_from_state",
    "info_of",
    "is_glob",
    "lock_info",
    "lock_key_pattern",
    "read_info",
    "scan_page",
    "search_pattern",
    "waited_locks",
]
