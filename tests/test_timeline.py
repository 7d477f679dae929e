"""The lock page's timeline (django_redislock.admin.timeline): an inline SVG drawn from a
scripted history, one row per holder, a bar per hold, thin bars for waits, marks for
lost and force-released holds, and runs of sub-pixel bars drawn as one."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from django_redislock.admin.timeline import Bar, build, merged, render
from django_redislock.history import LockEvent

END = dt.datetime(2026, 12, 7, 15, 0, tzinfo=dt.timezone.utc)
START = END - dt.timedelta(hours=1)
A, B = "web-1:10/MainThread", "web-2:20/worker"


def event(minute: float, type_: str, holder: str, token: str, **fields: object) -> LockEvent:
    at = START + dt.timedelta(minutes=minute)
    base = {"fence": None, "waited": None, "held": None, "owner": holder}
    base.update(fields)
    return LockEvent(
        at=at, event=type_, name="report", kind="lock", family="report", holder=holder,
        token=token, id=f"{int(at.timestamp() * 1000)}-0", **base,  # type: ignore[arg-type]
    )  # fmt: skip


SCRIPT = [
    event(5, "acquired", A, "tokA1", fence=1, waited=0.0),
    event(15, "released", A, "tokA1", fence=1, held=600.0),
    event(20, "acquired", B, "tokB1", fence=2, waited=90.0),  # waited from 18.5
    event(25, "lost", B, "tokB1", fence=2, held=300.0, reason="expired"),
    event(30, "acquired", A, "tokA2", fence=3),
    event(40, "force_released", A, "tokA2", fence=3, reason="by ops", owner=""),
    event(45, "timed_out", A, "tokA2", waited=60.0, owner=B),  # B gave up on A's hold
    event(50, "acquired", B, "tokB2", fence=4),  # still held at the end
]


def _count(svg: str, css: str) -> int:
    return len(re.findall(rf'<rect class="{css}"', svg))


def test_a_scripted_history_gives_its_bars_and_marks() -> None:
    timeline = build(reversed(SCRIPT), START, END)  # lock_history's order: newest first
    assert [row.owner for row in timeline.rows] == [A, B]
    svg = str(render(timeline))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert _count(svg, "hold") == 4  # A 5-15, B 20-25, A 30-40, B 50-end
    assert _count(svg, "wait") == 1  # B's 90 s wait before 20
    assert _count(svg, "timeout") == 1
    assert svg.count('class="mark lost"') == 1 and svg.count('class="mark force_released"') == 1
    assert "fence 3 · held 600.0 s · force-released" in svg
    assert "fence 4" in svg and "held now" in svg
    assert "gave up after 60.0 s" in svg
    assert 'aria-label="Timeline: 4 holds by 2 holders"' in svg
    assert svg.count('class="tick-label"') == 6  # 14:10 ... 15:00
    [b_lost] = [b for b in timeline.rows[1].bars if "lost" in b.title]
    assert b_lost.end - b_lost.start == 300.0


def test_a_hold_begun_before_the_window_starts_at_its_edge() -> None:
    released = event(2, "released", A, "old", fence=9, held=600.0)
    [row] = build([released], START, END).rows
    [bar] = row.bars
    assert bar.start == START.timestamp() and bar.end == START.timestamp() + 120


def test_hundreds_of_holds_an_hour_are_drawn_together_where_thinner_than_a_pixel() -> None:
    script = []
    for i in range(600):  # one 50 ms hold every 6 s: ~0.01 px each at 740 px per hour
        minute = i / 10
        script.append(event(minute, "acquired", A, f"t{i}", fence=i + 1))
        script.append(event(minute + 0.05 / 60, "released", A, f"t{i}", fence=i + 1, held=0.05))
    timeline = build(script, START, END)
    assert timeline.holds == 600
    svg = str(render(timeline))
    drawn = _count(svg, "hold many") + _count(svg, "hold")
    assert 1 <= drawn < 400  # far fewer rects than holds, none thinner than a pixel
    widths = [float(w) for w in re.findall(r'<rect class="hold[^"]*"[^>]* width="([\d.]+)"', svg)]
    assert min(widths) >= 1.0
    counts = [int(n) for n in re.findall(r"(\d+) holds drawn as one", svg)]
    assert sum(counts) + _count(svg, "hold") == 600


def test_merged_keeps_wide_bars_apart() -> None:
    bars = [Bar(0, 10, "hold", "a"), Bar(10.5, 20, "hold", "b"), Bar(20.1, 20.2, "hold", "c")]
    assert len(merged(bars, seconds_per_pixel=1.0)) == 2  # c joins b: thin and close
    assert merged(bars, seconds_per_pixel=1.0)[1].busy == pytest.approx(9.6)
    assert len(merged(bars, seconds_per_pixel=0.01)) == 3


def test_text_is_escaped() -> None:
    evil = event(5, "acquired", "<script>alert(1)</script>:1/x", "tok", fence=1)
    svg = str(render(build([evil], START, END)))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
