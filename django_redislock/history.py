"""The lock history (opt-in, ``REDISLOCK["HISTORY"]``): what happened to every lock, kept in
one capped stream per connection and read back by :func:`lock_history`.

The engine's events (:mod:`.events`) are put in a buffer in memory; a background flusher
(one thread per process, like the watchdog) sends them every ~100 ms in one pipelined
round trip: ``XADD ... MAXLEN ~`` per event, then ``XTRIM MINID`` for age. Nothing is
sent on a lock's acquire or release round trip. A process that dies loses what it had
not yet flushed (at most one batch); a flusher that cannot reach Redis drops its batch,
says so once, and tries again with the next one, never holding up a lock.

The stream's key is ``P:history`` (``P`` the key prefix). It has no hash tag: on a
cluster it lives on the node that owns that key's slot, one node, so one ``XREVRANGE``
reads every lock's history in order.
"""

from __future__ import annotations

import atexit
import datetime as dt
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from . import events
from .conf import get_config
from .holder import hostname, parse_holder

logger = logging.getLogger("django_redislock.history")

#: Seconds between two flushes, at most.
FLUSH_INTERVAL = 0.1
#: Events kept in memory while a flush falls behind; past it the oldest are dropped.
BUFFER_LIMIT = 20_000
#: Entries one ``XREVRANGE`` call of :func:`lock_history` reads.
READ_CHUNK = 1_000
#: The events kept: all but the watchdog's renewals (one per lock per third of its TTL,
#: which would crowd out the rest; the metrics count them).
RECORDED = events.TYPES - {events.RENEWAL}


def stream_key(prefix: str | None = None) -> str:
    """The history stream's key: ``P:history``."""
    return f"{get_config()['KEY_PREFIX'] if prefix is None else prefix}:history"


@dataclass(frozen=True)
class LockEvent:
    """One event of the history (:func:`lock_history`), newest first."""

    #: When it happened (aware, UTC), by the clock of the process it happened in.
    at: dt.datetime
    #: The event type: ``acquired``, ``released``, ``contended``, ``timed_out`` ...
    event: str
    name: str
    kind: str
    family: str
    fence: int | None
    #: Who held the lock, as ``host:pid/thread``: the acquirer (``acquired``,
    #: ``released``, ``lost``), the holder that refused (``contended``, ``busy``,
    #: ``timed_out``), the holder removed (``force_released``); ``""`` when unknown.
    holder: str
    #: Seconds the acquire waited, where it applies.
    waited: float | None
    #: Seconds the lock was held (``released``, ``lost``).
    held: float | None
    #: Where the event happened (the acquiring or waiting process), ``host:pid/thread``;
    #: ``""`` for ``force_released``.
    owner: str = ""
    #: The first characters of the token the event is about (pairs a release with its
    #: acquire).
    token: str = ""
    #: Why (``lost``, ``failed``), or who force-released it.
    reason: str | None = None
    #: The stream entry's id.
    id: str = ""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``at`` in ISO 8601)."""
        return {
            "at": self.at.isoformat(),
            "event": self.event,
            "name": self.name,
            "kind": self.kind,
            "family": self.family,
            "fence": self.fence,
            "holder": self.holder,
            "waited": self.waited,
            "held": self.held,
            "owner": self.owner,
            "token_prefix": self.token,
            "reason": self.reason,
            "id": self.id,
        }


# -- writing ---------------------------------------------------------------------------


#: Separates the fields of a packed event (not printable: never in a lock name, nor in a
#: holder description, whose own separator it is).
FIELD_SEPARATOR = "\x1f"
#: A packed event's fields, in order (:func:`pack`).
FIELDS = ("at", "e", "n", "k", "f", "fe", "h", "o", "t", "w", "hd", "r")

#: What a lock appends: (time.time(), its event, the thread it happened in).
Pending = tuple[float, events.LockEvent, str]


def _who(holder: Any) -> tuple[str, str, int | None]:
    """(``host:pid/thread``, token prefix, fence) of an event's ``holder``: a holder read
    by a script (``HolderState``), a ``LockInfo``, or ``None``."""
    if holder is None:
        return "", "", None
    description = getattr(holder, "description", None)
    if description is not None:  # a HolderState
        if not description:
            return "", holder.token[:6], holder.fence or None
        fields = parse_holder(description)
        owner = f"{fields.get('host', '')}:{fields.get('pid', '')}/{fields.get('thread', '')}"
        return owner, holder.token[:6], holder.fence or None
    return str(holder.owner), holder.token[:6], holder.fence  # a LockInfo


def _plain(value: object) -> str:
    return "" if value is None else str(value).replace(FIELD_SEPARATOR, " ")


def pack(pending: Pending, here: str) -> str:
    """The stream entry of one buffered event (``here``: ``host:pid`` of this process):
    its :data:`FIELDS`, joined, ``""`` where one does not apply. Names, kinds, families
    and holder descriptions never hold the separator; a reason may, and is cleaned."""
    at, event, thread = pending
    type_ = event.type
    me = f"{here}/{thread}"
    if type_ in _MINE:
        holder, token, fence = me, event.token_prefix or "", event.fence
    else:
        holder, token, fence = _who(event.holder)
        token = token or event.token_prefix or ""
        if event.fence is not None:
            fence = event.fence
    reason = event.reason
    if reason is None and event.user is not None:
        reason = f"by {event.user}"
    waited, held = event.waited, event.held
    return FIELD_SEPARATOR.join(
        (
            repr(at),
            type_,
            event.name,
            event.kind,
            event.family,
            str(fence) if fence else "",
            holder,
            "" if type_ == events.FORCE_RELEASED else me,
            token,
            "" if waited is None else f"{waited:.6f}",
            "" if held is None else f"{held:.6f}",
            "" if reason is None else _plain(reason)[:500],
        )
    )


#: The events about this process's own hold: the holder is here.
_MINE = frozenset({events.ACQUIRED, events.RELEASED, events.LOST})


def unpack(packed: str) -> dict[str, str]:
    """The fields of a packed event, by name."""
    return dict(zip(FIELDS, packed.split(FIELD_SEPARATOR), strict=False))


def _alias_of(event: events.LockEvent) -> str:
    alias = event.connection or getattr(event.lock, "connection", None)
    return alias if isinstance(alias, str) else get_config()["CONNECTION"]


class Flusher:
    """The buffer and the thread that sends it: :meth:`add` never waits on Redis."""

    def __init__(self) -> None:
        self._pending: deque[tuple[str, Pending]] = deque(maxlen=BUFFER_LIMIT)
        self._stop = threading.Event()
        self._start_lock = threading.Lock()
        # One flush at a time (the thread's, a test's, the last one at exit): the stream
        # keeps the order the events came in.
        self._flush_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()  # aliases whose failure was logged
        self.dropped = 0  # events dropped: a full buffer, or a batch Redis refused

    def add(self, alias: str, pending: Pending) -> None:
        """Buffer one event for ``alias``'s stream: no call to Redis, no formatting."""
        if len(self._pending) == BUFFER_LIMIT:
            self.dropped += 1
        self._pending.append((alias, pending))
        thread = self._thread
        if thread is None or not thread.is_alive():
            self._start()

    def _start(self) -> None:
        with self._start_lock:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._run, name="redislock-history", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL):
            self.flush()

    def flush(self) -> int:
        """Send what is buffered now, one pipeline per connection: the events sent."""
        with self._flush_lock:
            batches: dict[str, list[Pending]] = {}
            pending = self._pending
            while pending:
                alias, event = pending.popleft()
                batches.setdefault(alias, []).append(event)
            return sum(self._send(alias, batch) for alias, batch in batches.items())

    def _send(self, alias: str, batch: list[Pending]) -> int:
        from .kinds import Operation
        from .kinds.operation import raw
        from .scripts import HISTORY_APPEND
        from .transports.single import SingleNode

        config = get_config()
        oldest_ms = int((time.time() - config["HISTORY_MAX_AGE"]) * 1000)
        try:
            here = f"{hostname()}:{os.getpid()}"
            entries = [pack(event, here) for event in batch]
            args = (config["HISTORY_MAXLEN"], oldest_ms, *entries)
            SingleNode(alias).call(Operation(HISTORY_APPEND, (stream_key(),), args, raw))
        except Exception as exc:  # never let the thread die: the next batch tries again
            self.dropped += len(batch)
            if alias not in self._failing:
                self._failing.add(alias)
                logger.warning(
                    "Lock history of connection %r: could not send %d event(s), dropped "
                    "(said once until it works again): %s",
                    alias,
                    len(batch),
                    exc,
                )
            return 0
        if alias in self._failing:
            self._failing.discard(alias)
            logger.info("Lock history of connection %r is sent again", alias)
        return len(batch)

    def stop(self, timeout: float = 2.0) -> None:
        """Stop the thread and send what is left (at exit, and in tests)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout)
        self.flush()

    def pending(self) -> int:
        """Events buffered, not yet sent."""
        return len(self._pending)

    def running(self) -> bool:
        """True while the flusher thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()


_flusher = Flusher()


def flusher() -> Flusher:
    """This process's flusher."""
    return _flusher


def flush() -> int:
    """Send what this process has buffered now, without waiting for the flusher's next
    turn (tests, a management command about to exit): the events sent."""
    return _flusher.flush()


def record(event: events.LockEvent) -> None:
    """The event consumer: buffer ``event`` for the flusher (most types; see
    :data:`RECORDED`)."""
    if event.type in RECORDED:
        _flusher.add(_alias_of(event), (time.time(), event, threading.current_thread().name))


def enable() -> None:
    """Record every lock event from now on (the app calls it when ``HISTORY`` is on)."""
    events.subscribe(record)


def disable() -> None:
    """Stop recording, and send what is buffered."""
    events.unsubscribe(record)
    _flusher.flush()


def _at_exit() -> None:
    _flusher.stop()


def _reset_after_fork() -> None:
    # The child has no flusher thread; what is buffered is the parent's to send.
    global _flusher
    _flusher = Flusher()


atexit.register(_at_exit)
os.register_at_fork(after_in_child=_reset_after_fork)


# -- reading ---------------------------------------------------------------------------


def _since_ms(since: dt.datetime | dt.timedelta | None) -> int | None:
    if since is None:
        return None
    if isinstance(since, dt.timedelta):
        return int((time.time() - since.total_seconds()) * 1000)
    if isinstance(since, dt.datetime):
        if since.tzinfo is None:
            raise ValueError(f"since must be an aware datetime (with a timezone), not {since!r}")
        return int(since.timestamp() * 1000)
    raise ValueError(f"since must be a datetime, a timedelta or None, not {since!r}")


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_since(text: str) -> dt.datetime | dt.timedelta:
    """``--since``'s value: a span ago (``90s``, ``15m``, ``1h``, ``2d``) or an ISO date and
    time (UTC unless it says). ``ValueError`` naming the value otherwise."""
    value = text.strip()
    unit = _UNITS.get(value[-1:].lower())
    if unit is not None:
        try:
            amount = float(value[:-1])
        except ValueError:
            amount = -1.0
        if amount >= 0:
            return dt.timedelta(seconds=amount * unit)
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"--since must be a span ago (90s, 15m, 1h, 2d) or an ISO date and time, not {text!r}"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.timezone.utc)


def _number(value: str | None) -> float | None:
    try:
        return None if value is None else float(value)
    except ValueError:
        return None


def event_of(entry_id: str, entry: dict[str, str]) -> LockEvent:
    """A :class:`LockEvent` from a stream entry (its packed field ``d``)."""
    fields = unpack(entry["d"]) if "d" in entry else entry
    stamp = _number(fields.get("at"))
    if stamp is None:  # the entry's id is the server's clock (ms) when it was added
        stamp = int(entry_id.partition("-")[0]) / 1000
    fence = fields.get("fe", "")
    return LockEvent(
        at=dt.datetime.fromtimestamp(stamp, tz=dt.timezone.utc),
        event=fields.get("e", ""),
        name=fields.get("n", ""),
        kind=fields.get("k", ""),
        family=fields.get("f", ""),
        fence=int(fence) if fence.isdigit() else None,
        holder=fields.get("h", ""),
        waited=_number(fields.get("w")),
        held=_number(fields.get("hd")),
        owner=fields.get("o", ""),
        token=fields.get("t", ""),
        reason=fields.get("r") or None,
        id=entry_id,
    )


def _decoded(entries: Iterable[Any]) -> list[tuple[str, dict[str, str]]]:
    def text(value: Any) -> str:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

    return [(text(i), {text(k): text(v) for k, v in f.items()}) for i, f in entries]


def lock_history(
    name: str | None = None,
    *,
    connection: str | None = None,
    since: dt.datetime | dt.timedelta | None = None,
    limit: int = 500,
) -> list[LockEvent]:
    """The recorded events of lock ``name`` (every lock's when ``None``), newest first.

    ``since``: only events from then on (an aware datetime, or a timedelta ago);
    ``limit``: at most that many. Reads the stream of ``connection`` (default
    ``REDISLOCK["CONNECTION"]``); empty when the history is off or nothing was recorded.
    """
    from redis.exceptions import RedisError

    from .connection import lock_client
    from .info import _alias, _unavailable

    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive int, not {limit!r}")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"name must be a lock name or None, not {name!r}")
    oldest = _since_ms(since)
    alias = _alias(connection)
    low = "-" if oldest is None else str(oldest)
    high = "+"
    found: list[LockEvent] = []
    try:
        client = lock_client(alias)
        while len(found) < limit:
            count = READ_CHUNK if name is not None else min(READ_CHUNK, limit - len(found))
            read: Any = client.xrevrange(stream_key(), max=high, min=low, count=count)
            entries = _decoded(read)
            for entry_id, entry in entries:
                event = event_of(entry_id, entry)
                if name is None or event.name == name:
                    found.append(event)
            if len(entries) < count:
                break
            high = "(" + entries[-1][0]
    except RedisError as exc:
        raise _unavailable(alias, name, exc) from exc
    return found[:limit]


__all__ = [
    "BUFFER_LIMIT",
    "FIELDS",
    "FIELD_SEPARATOR",
    "FLUSH_INTERVAL",
    "RECORDED",
    "Flusher",
    "LockEvent",
    "disable",
    "enable",
    "event_of",
    "flush",
    "flusher",
    "lock_history",
    "pack",
    "parse_since",
    "record",
    "stream_key",
    "unpack",
]
