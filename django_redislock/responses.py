"""What a locked view answers when it cannot run: 423 when the lock is busy, 503 when the
lock server cannot be reached. Each as HTML for browsers, JSON for ``Accept:
application/json`` and plain text otherwise (curl, scripts)."""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import TYPE_CHECKING, Any

from django.http import HttpResponse
from django.utils.html import format_html, format_html_join

from .conf import get_config

if TYPE_CHECKING:
    from .inspection import LockInfo
    from .lock import BaseLock

#: Seconds a 503 tells the client to wait when ``REDISLOCK["VIEW_UNAVAILABLE_RETRY_AFTER"]``
#: says nothing else.
DEFAULT_UNAVAILABLE_RETRY_AFTER = 5


def retry_after(lock: BaseLock) -> int:
    """Whole seconds (rounded up, at least 1) until the holder's lock expires."""
    left = lock.last_holder_ttl
    return max(1, math.ceil(left)) if left else 1


def unavailable_retry_after() -> int:
    """The ``Retry-After`` of a 503: ``REDISLOCK["VIEW_UNAVAILABLE_RETRY_AFTER"]`` seconds."""
    return int(get_config()["VIEW_UNAVAILABLE_RETRY_AFTER"])


def preferred_format(request: Any) -> str:
    """``"json"``, ``"html"`` or ``"text"``, from the request's ``Accept`` header.

    JSON only when asked for without HTML (an API client); HTML when a browser asks for it;
    text for everything else (``*/*`` from curl, no request at all).
    """
    headers = getattr(request, "headers", None)
    accept = str(headers.get("Accept", "")) if headers is not None else ""
    if "application/json" in accept and "text/html" not in accept:
        return "json"
    if "text/html" in accept:
        return "html"
    return "text"


def _since(info: LockInfo) -> str | None:
    when = info.acquired_at
    if when is None:
        return None
    return when.astimezone(dt.timezone.utc).isoformat(timespec="seconds")


def _holder_sentence(info: LockInfo | None) -> str:
    if info is None:
        return "Its holder released it a moment ago."
    owner = info.owner
    pid = "?" if owner.pid is None else owner.pid
    who = f"host {owner.host or '?'}, pid {pid}"
    purpose = f" for {info.purpose}" if info.purpose else ""
    since = _since(info)
    when = f" since {since.replace('+00:00', ' UTC').replace('T', ' ')}" if since else ""
    return f"Held by {who}{purpose}{when}."


def _respond(
    fmt: str, status: int, seconds: int, title: str, sentences: list[str], data: dict[str, Any]
) -> HttpResponse:
    if fmt == "json":
        body = json.dumps({**data, "detail": " ".join(sentences), "retry_after": seconds})
        response = HttpResponse(body, status=status, content_type="application/json")
    elif fmt == "html":
        body = format_html(
            '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            "<title>{}</title></head><body><h1>{}</h1>{}</body></html>\n",
            title,
            title,
            format_html_join("", "<p>{}</p>", ((sentence,) for sentence in sentences)),
        )
        response = HttpResponse(body, status=status, content_type="text/html; charset=utf-8")
    else:
        text = f"{title}: {' '.join(sentences)}\n"
        response = HttpResponse(text, status=status, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(seconds)
    return response


def default_busy_response(
    lock: BaseLock, info: LockInfo | None = None, request: Any = None
) -> HttpResponse:
    """HTTP 423 Locked: who holds the lock and since when, ``Retry-After`` from the
    holder's remaining TTL."""
    seconds = retry_after(lock)
    sentences = [
        "This resource is busy.",
        _holder_sentence(info),
        f"Retry in {seconds} s.",
    ]
    data: dict[str, Any] = {"lock": lock.name, "holder": None}
    if info is not None:
        data["holder"] = {
            "host": info.owner.host,
            "pid": info.owner.pid,
            "purpose": info.purpose,
            "since": _since(info),
        }
    return _respond(preferred_format(request), 423, seconds, "Locked", sentences, data)


def default_unavailable_response(error: Exception, request: Any = None) -> HttpResponse:
    """HTTP 503 Service Unavailable with ``Retry-After``: the lock server cannot be reached.

    The body says no more than that (the error, which names hosts and ports, is logged).
    """
    seconds = unavailable_retry_after()
    sentences = [
        "The service cannot take this request right now: its lock server is unreachable.",
        f"Retry in {seconds} s.",
    ]
    return _respond(preferred_format(request), 503, seconds, "Service Unavailable", sentences, {})


__all__ = [
    "DEFAULT_UNAVAILABLE_RETRY_AFTER",
    "default_busy_response",
    "default_unavailable_response",
    "preferred_format",
    "retry_after",
    "unavailable_retry_after",
]
