"""Who holds a lock: the description written with the token at acquire time."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import cache


@cache
def hostname() -> str:
    """This machine's host name (looked up once)."""
    return socket.gethostname()


def current_thread_label() -> str:
    """The thread's name, plus the asyncio task's name inside a running task."""
    label = threading.current_thread().name
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    if task is not None:
        label = f"{label}/{task.get_name()}"
    return label


#: Separates the fields of the holder description (not printable, so never in a name).
SEPARATOR = "\x1f"


#: Separates a held lock's token, fence and holder description in its key
#: (scripts/held.lua), and the places in a lock's line of waiters (scripts/line.lua).
RECORD_SEPARATOR = "\x1e"


def _plain(text: str) -> str:
    # Neither separator: both strings carry the description.
    return text.replace(SEPARATOR, " ").replace(RECORD_SEPARATOR, " ")


def held_token(value: str) -> str:
    """The token in a held lock's key (``token RS fence RS holder``, or a bare token)."""
    return value.partition(RECORD_SEPARATOR)[0]


#: With tracing on (:mod:`django_redislock.contrib.otel`), the current span's context as
#: a W3C ``traceparent``, written as the description's last field: a waiter refused by
#: this holder reads it from the refusal and links its span to ours. ``None``: off.
trace_field: Callable[[], str] | None = None


def holder_description(purpose: str | None, watchdog: bool, ttl_ms: int, role: str = "") -> str:
    """host, pid, thread, purpose, acquired-at, watchdog flag and TTL, in one string.

    One string (not one hash field each) keeps the acquire call small and the
    held lock's memory low; :func:`parse_holder` reads it back. ``role`` (an election's
    lease says ``"election"``) comes last, after the trace field (empty when tracing is
    off): a plain lock's description stays as short as before.
    """
    fields = [
        hostname(),
        str(os.getpid()),
        _plain(current_thread_label()),
        _plain(purpose or ""),
        repr(time.time()),
        "1" if watchdog else "0",
        str(ttl_ms),
    ]
    trace = trace_field
    if trace is not None or role:
        fields.append("" if trace is None else _plain(trace()))
    if role:
        fields.append(role)
    return SEPARATOR.join(fields)


HOLDER_FIELDS = (
    "host", "pid", "thread", "purpose", "acquired_at", "watchdog", "ttl_ms", "trace", "role"
)  # fmt: skip


def parse_holder(description: str) -> dict[str, str]:
    """The fields of a :func:`holder_description` string."""
    return dict(zip(HOLDER_FIELDS, description.split(SEPARATOR), strict=False))
