"""Who holds a lock: the metadata written beside the token at acquire time."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
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


def _plain(text: str) -> str:
    # Neither this string's separator nor the one between places in a lock's line of
    # waiters (RS, scripts/line.lua), which carries the description too.
    return text.replace(SEPARATOR, " ").replace("\x1e", " ")


def holder_description(purpose: str | None, watchdog: bool, ttl_ms: int) -> str:
    """host, pid, thread, purpose, acquired-at, watchdog flag and TTL, in one string.

    One string (not one hash field each) keeps the acquire call small and the
    held lock's memory low; :func:`parse_holder` reads it back.
    """
    return SEPARATOR.join(
        (
            hostname(),
            str(os.getpid()),
            _plain(current_thread_label()),
            _plain(purpose or ""),
            repr(time.time()),
            "1" if watchdog else "0",
            str(ttl_ms),
        )
    )


HOLDER_FIELDS = ("host", "pid", "thread", "purpose", "acquired_at", "watchdog", "ttl_ms")


def parse_holder(description: str) -> dict[str, str]:
    """The fields of a :func:`holder_description` string."""
    return dict(zip(HOLDER_FIELDS, description.split(SEPARATOR), strict=False))
