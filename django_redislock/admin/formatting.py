"""What the admin pages show, as text: TTLs, moments, and the fields of a lock, a holder
and a waiter."""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlencode

from django.conf import settings
from django.utils import formats, timezone
from django.utils.timesince import timesince

from ..inspection import LockHolder, LockInfo, LockWaiter


def with_query(url: str, query: dict[str, str]) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode(query)}"


def format_ttl(seconds: float | None) -> str:
    """A TTL for people: ``12.3 s``, ``4 min 5 s``, ``2 h 30 min``."""
    if seconds is None:
        return "no TTL"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def format_moment(moment: dt.datetime | None) -> str:
    """An aware datetime in the current time zone, localized, with how long ago."""
    if moment is None:
        return "—"
    local = timezone.localtime(moment) if settings.USE_TZ else moment
    return f"{formats.localize(local)} ({timesince(moment)} ago)"


def lock_fields(info: LockInfo, alias: str) -> list[tuple[str, str]]:
    """(label, text) pairs describing a held lock as a whole."""
    return [
        ("Name", info.name),
        ("Kind", info.kind_text),
        ("Holders", info.holders_text),
        ("Redis key", info.key),
        ("Connection", alias),
    ]


def holder_fields(holder: LockHolder) -> list[tuple[str, str]]:
    """(label, text) pairs describing one holder, for the detail and confirmation pages."""
    return [
        ("Purpose", holder.purpose or "—"),
        ("Host", holder.host or "—"),
        ("Process ID", "—" if holder.pid is None else str(holder.pid)),
        ("Thread", holder.thread or "—"),
        ("TTL left", format_ttl(holder.ttl)),
        ("Acquired at", format_moment(holder.acquired_at)),
        ("Fence", "—" if holder.fence is None else str(holder.fence)),
        ("Watchdog", "on (renewed while the holder runs)" if holder.watchdog else "off"),
        ("Token", holder.short_token),
    ]


def waiter_fields(waiter: LockWaiter) -> list[tuple[str, str]]:
    """(label, text) pairs describing one waiter."""
    return [
        ("Purpose", waiter.purpose or "—"),
        ("Kind", waiter.kind),
        ("Owner", str(waiter.owner)),
        ("Waiting since", format_moment(waiter.waiting_since)),
        ("Token", waiter.short_token),
    ]


__all__ = [
    "format_moment",
    "format_ttl",
    "holder_fields",
    "lock_fields",
    "waiter_fields",
    "with_query",
]
