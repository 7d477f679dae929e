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


def holder_fields(purpose: str | None, watchdog: bool, ttl_ms: int) -> list[str | int]:
    """Flat field/value pairs for the metadata hash (see scripts/acquire.lua)."""
    return [
        "host",
        hostname(),
        "pid",
        os.getpid(),
        "thread",
        current_thread_label(),
        "purpose",
        purpose or "",
        "acquired_at",
        repr(time.time()),
        "watchdog",
        1 if watchdog else 0,
        "ttl_ms",
        ttl_ms,
    ]
