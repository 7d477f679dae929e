"""What ``manage.py redislock top`` shows: one snapshot of the locks of a connection (who
holds what, who waits, the hot families and the latest events), as data (:func:`snapshot`)
and as plain text (:func:`as_text`). The live view draws the same snapshot with rich."""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Any

from .history import LockEvent, lock_history
from .hot import FamilyStats, hot_families, seconds_text
from .info import LockInfo, LockWaiter
from .inspection import held_locks, waited_locks

#: Rows of each part at most.
HELD_ROWS = 20
WAITING_ROWS = 10
HOT_ROWS = 10
RECENT_ROWS = 10
#: The window the hot families are ranked over.
HOT_WINDOW = dt.timedelta(minutes=15)


@dataclass(frozen=True)
class Snapshot:
    """One look at the locks of a connection."""

    at: dt.datetime
    connection: str
    held: list[LockInfo]
    #: Whether there were more held locks than :data:`HELD_ROWS`.
    more_held: bool
    waiting: list[tuple[LockInfo, LockWaiter]]
    hot: list[FamilyStats]
    recent: list[LockEvent]
    history_on: bool


def snapshot(connection: str | None = None) -> Snapshot:
    """Read a :class:`Snapshot` (a few round trips: a page of held locks, the waiters,
    the history of the last :data:`HOT_WINDOW`)."""
    from .conf import get_config

    config = get_config()
    alias = config["CONNECTION"] if connection is None else connection
    listed = list(itertools.islice(held_locks(connection=alias), HELD_ROWS + 1))
    waiting = sorted(
        ((info, waiter) for info in waited_locks(connection=alias) for waiter in info.waiters),
        key=lambda pair: pair[1].waiting_since,
    )
    recorded: list[LockEvent] = []
    if config["HISTORY"]:
        since = dt.datetime.now(dt.timezone.utc) - HOT_WINDOW
        recorded = lock_history(connection=alias, since=since, limit=20_000)
    return Snapshot(
        at=dt.datetime.now(dt.timezone.utc),
        connection=alias,
        held=sorted(listed[:HELD_ROWS], key=lambda i: i.name),
        more_held=len(listed) > HELD_ROWS,
        waiting=waiting[:WAITING_ROWS],
        hot=hot_families(recorded)[:HOT_ROWS],
        recent=recorded[:RECENT_ROWS],
        history_on=bool(config["HISTORY"]),
    )


def as_dict(shot: Snapshot) -> dict[str, Any]:
    """The snapshot, JSON-ready (token prefixes only)."""
    return {
        "at": shot.at.isoformat(),
        "connection": shot.connection,
        "held": [
            {
                "name": info.name,
                "kind": info.kind,
                "term": info.term,
                "holders": info.holders_text,
                "owner": str(info.owner),
                "purpose": info.purpose,
                "ttl": None if info.ttl is None else round(info.ttl, 3),
                "fence": info.fence,
                "waiting": info.waiting,
            }
            for info in shot.held
        ],
        "more_held": shot.more_held,
        "waiting": [
            {
                "name": info.name,
                "kind": waiter.kind,
                "owner": str(waiter.owner),
                "purpose": waiter.purpose,
                "waiting_since": waiter.waiting_since.isoformat(),
                "blocked_by": [str(holder.owner) for holder in info.holders],
            }
            for info, waiter in shot.waiting
        ],
        "hot": [
            {
                "family": stats.family,
                "kind": stats.kind,
                "acquisitions": stats.acquisitions,
                "total_wait": round(stats.total_wait, 6),
                "wait_p50": stats.wait(0.5),
                "wait_p99": stats.wait(0.99),
                "hold_p50": stats.hold(0.5),
                "hold_p99": stats.hold(0.99),
                "timeouts": stats.timeouts,
                "lost": stats.lost,
            }
            for stats in shot.hot
        ],
        "recent": [event.as_dict() for event in shot.recent],
        "history_on": shot.history_on,
    }


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """Aligned columns, two spaces apart."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def sections(shot: Snapshot) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, headers, rows) of each part, as text: what both views draw."""
    now = shot.at
    held = [
        [
            i.name,
            i.kind,
            i.holders_text,
            str(i.owner),
            i.purpose or "-",
            seconds_text(i.ttl),
            str(i.waiting),
        ]
        for i in shot.held
    ]
    waiting = [
        [
            i.name,
            w.kind,
            str(w.owner),
            w.purpose or "-",
            seconds_text((now - w.waiting_since).total_seconds()),
            ", ".join(str(h.owner) for h in i.holders),
        ]
        for i, w in shot.waiting
    ]
    hot = [
        [
            s.family,
            s.kind,
            str(s.acquisitions),
            seconds_text(s.total_wait),
            seconds_text(s.wait(0.99)),
            seconds_text(s.hold(0.99)),
            str(s.timeouts),
            str(s.lost),
        ]
        for s in shot.hot
    ]
    recent = [
        [
            e.at.strftime("%H:%M:%S.%f")[:-3],
            e.event,
            e.name,
            e.holder or "-",
            "" if e.fence is None else str(e.fence),
        ]
        for e in shot.recent
    ]
    more = " (first 20)" if shot.more_held else ""
    history = "" if shot.history_on else " (REDISLOCK['HISTORY'] is off)"
    return [
        (f"Held{more}", ["NAME", "KIND", "HOLDERS", "OWNER", "PURPOSE", "TTL", "WAITING"], held),
        (
            "Waiting, longest first",
            ["NAME", "KIND", "WAITER", "PURPOSE", "WAITED", "BLOCKED BY"],
            waiting,
        ),
        (
            f"Hot families, last 15 min{history}",
            [
                "FAMILY",
                "KIND",
                "ACQUIRED",
                "TOTAL WAIT",
                "WAIT P99",
                "HOLD P99",
                "TIMEOUTS",
                "LOST",
            ],
            hot,
        ),
        (f"Recent events{history}", ["AT", "EVENT", "NAME", "HOLDER", "FENCE"], recent),
    ]


def as_text(shot: Snapshot) -> str:
    """The snapshot as plain text (``top --once``)."""
    lines = [f"redislock top · {shot.connection} · {shot.at:%Y-%m-%d %H:%M:%S} UTC", ""]
    for title, headers, rows in sections(shot):
        lines.append(f"{title}:")
        lines += ["  " + line for line in _table(headers, rows)] if rows else ["  (none)"]
        lines.append("")
    return "\n".join(lines)


__all__ = ["Snapshot", "as_dict", "as_text", "sections", "snapshot"]
