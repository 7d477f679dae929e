"""A lock's timeline for its admin page: the history of a window (the last hour) drawn on
the server as an inline SVG, no script. One row per holder (``host:pid/thread``): a bar
from each acquire to its release, a thin bar for each wait before it (and for a wait
that timed out), a mark where a hold was lost or force-released; the fence and times in
each bar's ``<title>`` (shown on hover). Bars thinner than a pixel, less than two pixels
apart, are drawn together: one bar for the run, as opaque as the run was busy, its title
saying how many and how long they held.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from ..history import LockEvent

#: The pixel sizes of the drawing.
WIDTH = 960
LABEL_WIDTH = 220
ROW_HEIGHT = 22
BAR_HEIGHT = 14
WAIT_HEIGHT = 4
AXIS_HEIGHT = 22
#: Rows drawn at most (the holders with the most time held); the rest are counted.
MAX_ROWS = 40


@dataclass
class Bar:
    """A hold (``kind`` ``"hold"``), a wait (``"wait"``) or a wait that gave up
    (``"timeout"``), from ``start`` to ``end`` (seconds since the epoch)."""

    start: float
    end: float
    kind: str
    title: str
    count: int = 1
    #: Seconds covered by the bars drawn as this one (its length, for a single bar).
    busy: float = 0.0

    def __post_init__(self) -> None:
        if not self.busy:
            self.busy = self.end - self.start


@dataclass
class Mark:
    """A hold that ended badly: ``"lost"`` or ``"force_released"``."""

    at: float
    kind: str
    title: str


@dataclass
class Row:
    """One holder's line of the timeline."""

    owner: str
    bars: list[Bar] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    @property
    def held(self) -> float:
        return sum(b.end - b.start for b in self.bars if b.kind == "hold")


@dataclass
class Timeline:
    """What :func:`render` draws: the window and its rows, first holder first."""

    start: float
    end: float
    rows: list[Row]
    #: Rows left out past :data:`MAX_ROWS`.
    hidden: int = 0

    @property
    def holds(self) -> int:
        return sum(b.count for row in self.rows for b in row.bars if b.kind == "hold")


def _seconds(moment: dt.datetime) -> float:
    return moment.timestamp()


def _span(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def build(events: Iterable[LockEvent], start: dt.datetime, end: dt.datetime) -> Timeline:
    """The timeline of ``events`` (any order) between ``start`` and ``end``."""
    low, high = _seconds(start), _seconds(end)
    rows: dict[str, Row] = {}
    open_holds: dict[str, tuple[str, float, int | None]] = {}  # token -> owner, start, fence

    def row(owner: str) -> Row:
        return rows.setdefault(owner or "unknown", Row(owner or "unknown"))

    def hold(owner: str, begin: float, finish: float, fence: int | None, how: str) -> None:
        fenced = f"fence {fence} · " if fence is not None else ""
        title = f"{owner} · {fenced}held {_span(finish - begin)}{how}"
        row(owner).bars.append(Bar(max(begin, low), min(finish, high), "hold", title))

    for event in sorted(events, key=lambda e: (e.at, e.id)):
        at = _seconds(event.at)
        if event.event == "acquired":
            if event.waited:
                title = f"{event.holder} · waited {_span(event.waited)}"
                row(event.holder).bars.append(Bar(at - event.waited, at, "wait", title))
            open_holds[event.token] = (event.holder, at, event.fence)
        elif event.event in ("released", "lost", "force_released"):
            began = open_holds.pop(event.token, None)
            owner = event.holder if began is None else began[0]
            if began is not None:
                begin = began[1]
            elif event.held is not None:  # acquired before the window
                begin = at - event.held
            else:
                begin = low
            fence = event.fence if began is None or began[2] is None else began[2]
            how = {"released": "", "lost": " · lost", "force_released": " · force-released"}
            hold(owner, begin, at, fence, how[event.event])
            if event.event != "released":
                by = f" ({event.reason})" if event.reason else ""
                label = "lost" if event.event == "lost" else "force-released"
                row(owner).marks.append(Mark(at, event.event, f"{owner} · {label}{by}"))
        elif event.event == "timed_out" and event.waited:
            title = f"{event.owner} · gave up after {_span(event.waited)}"
            row(event.owner).bars.append(Bar(at - event.waited, at, "timeout", title))
    for owner, begin, fence in open_holds.values():
        hold(owner, begin, high, fence, " · held now")
    shown = sorted(rows.values(), key=lambda r: min((b.start for b in r.bars), default=high))
    hidden = 0
    if len(shown) > MAX_ROWS:
        keep = sorted(shown, key=lambda r: r.held, reverse=True)[:MAX_ROWS]
        hidden = len(shown) - MAX_ROWS
        shown = [r for r in shown if r in keep]
    for each in shown:
        each.bars = [b for b in each.bars if b.end >= low and b.start <= high]
        for b in each.bars:
            b.start, b.end = max(b.start, low), min(b.end, high)
    return Timeline(low, high, shown, hidden)


def merged(bars: list[Bar], seconds_per_pixel: float) -> list[Bar]:
    """``bars`` (of one kind) with every run of bars thinner than a pixel, less than two
    pixels apart (a bar is drawn a pixel wide at least, so they would touch), as one bar
    whose title counts them."""
    out: list[Bar] = []
    noun = {"hold": "holds", "wait": "waits", "timeout": "waits that gave up"}
    for bar in sorted(bars, key=lambda b: b.start):
        last = out[-1] if out else None
        thin = bar.end - bar.start < seconds_per_pixel
        if last is not None and thin and bar.start - last.end < 2 * seconds_per_pixel:
            last.end = max(last.end, bar.end)
            last.count += 1
            last.busy += bar.end - bar.start
            last.title = (
                f"{last.count} {noun[last.kind]} drawn as one: {_span(last.busy)} in "
                f"{_span(last.end - last.start)}"
            )
            continue
        out.append(Bar(bar.start, bar.end, bar.kind, bar.title, bar.count, bar.busy))
    return out


def render(timeline: Timeline, width: int = WIDTH) -> SafeString:
    """The timeline as an inline ``<svg>`` (its colours from the admin's CSS variables,
    so it follows the dark mode)."""
    plot = width - LABEL_WIDTH
    span = max(timeline.end - timeline.start, 1e-9)
    per_pixel = span / plot
    height = AXIS_HEIGHT + ROW_HEIGHT * max(len(timeline.rows), 1)

    def x(moment: float) -> float:
        return LABEL_WIDTH + (moment - timeline.start) / per_pixel

    parts = [
        f'<svg class="heldlock-timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="Timeline: {_count(timeline.holds, "hold")} by '
        f'{_count(len(timeline.rows), "holder")}">'
    ]
    for tick in _ticks(timeline.start, timeline.end):
        tx = x(tick)
        label = dt.datetime.fromtimestamp(tick, tz=dt.timezone.utc).strftime("%H:%M")
        parts.append(
            f'<line class="tick" x1="{tx:.1f}" y1="{AXIS_HEIGHT - 4}" x2="{tx:.1f}" '
            f'y2="{height}"/><text class="tick-label" x="{tx:.1f}" y="12">{label}</text>'
        )
    for index, each in enumerate(timeline.rows):
        top = AXIS_HEIGHT + index * ROW_HEIGHT
        parts.append(
            f'<text class="owner" x="4" y="{top + BAR_HEIGHT - 2}">'
            f"{escape(_short(each.owner))}<title>{escape(each.owner)}</title></text>"
        )
        for kind in ("wait", "timeout", "hold"):
            for bar in merged([b for b in each.bars if b.kind == kind], per_pixel):
                tall = BAR_HEIGHT if kind == "hold" else WAIT_HEIGHT
                y = top + (BAR_HEIGHT - tall) / 2
                bar_width = max((bar.end - bar.start) / per_pixel, 1.0)
                css, opacity = kind, ""
                if bar.count > 1:  # as opaque as the run was busy, and never invisible
                    share = bar.busy / max(bar.end - bar.start, 1e-9)
                    css, opacity = (
                        f"{kind} many",
                        f' fill-opacity="{max(0.3, min(1.0, share)):.2f}"',
                    )
                parts.append(
                    f'<rect class="{css}" x="{x(bar.start):.1f}" y="{y:.1f}" '
                    f'width="{bar_width:.1f}" height="{tall}"{opacity}><title>'
                    f"{escape(bar.title)}</title></rect>"
                )
        for mark in each.marks:
            mx = x(mark.at)
            parts.append(
                f'<path class="mark {mark.kind}" d="M{mx - 4:.1f} {top - 1} l8 {BAR_HEIGHT + 2} '
                f'm0 -{BAR_HEIGHT + 2} l-8 {BAR_HEIGHT + 2}"><title>{escape(mark.title)}'
                "</title></path>"
            )
    parts.append("</svg>")
    return mark_safe("".join(parts))


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _short(owner: str, limit: int = 30) -> str:
    return owner if len(owner) <= limit else "…" + owner[-(limit - 1) :]


def _ticks(start: float, end: float) -> list[float]:
    """Every 10 minutes (every minute in a window under 15 minutes)."""
    step = 600 if end - start > 900 else 60
    first = (int(start) // step + 1) * step
    return [float(t) for t in range(first, int(end) + 1, step)]


__all__ = ["Bar", "Mark", "Row", "Timeline", "build", "merged", "render"]
