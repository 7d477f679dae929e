"""Scenario 4: placeholder until the library grows the watchdog it measures."""

from __future__ import annotations

import inspect

from bench.adapters import ours_skip_reason
from bench.context import Context
from bench.report import Section


def _has_watchdog() -> str | None:
    reason = ours_skip_reason()
    if reason:
        return reason
    import django_redislock

    if "watchdog" not in inspect.signature(django_redislock.Lock).parameters:
        return "django_redislock.Lock has no `watchdog` parameter yet"
    return None


def run_watchdog(ctx: Context) -> Section:
    """Scenario 4: 10,000 held watchdog locks in one process (not written yet)."""
    section = Section("4. Watchdog scale")
    reason = _has_watchdog()
    section.skipped = reason or (
        "the library has `watchdog=True` now, but this scenario is not written yet "
        "(renewal CPU per second and renewals per Redis round trip at 10,000 held locks)"
    )
    return section
