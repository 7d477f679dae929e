"""What an async lock call does when its caller is cancelled.

A clean-up that a cancel interrupts would leave a key (or a claim) behind until
its TTL: it runs to its end in a task of its own, held here so it is not
garbage-collected, and the cancel completes after it. Its failure is logged (the
key expires by itself anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

release_logger = logging.getLogger("django_redislock.release")

# Strong references to clean-up tasks started when an async call is cancelled.
_background_tasks: set[asyncio.Task[Any]] = set()


def cancel_count() -> int:
    """How many cancels the current task has been asked for (0 before Python 3.11)."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling() if cancelling is not None else 0


def in_background(coro: Any) -> asyncio.Task[Any]:
    task = asyncio.ensure_future(coro)
    _background_tasks.add(task)
    task.add_done_callback(_background_done)
    return task


async def finish_shielded(coro: Any) -> None:
    """Run a clean-up to its end even though the caller is being cancelled.

    A second cancel stops the waiting, not the clean-up; its errors are logged
    by :func:`_background_done` (the key or claim expires by itself anyway).
    """
    task = in_background(coro)
    with contextlib.suppress(Exception):
        await asyncio.shield(task)


def _background_done(task: asyncio.Task[Any]) -> None:
    _background_tasks.discard(task)
    if not task.cancelled() and task.exception() is not None:
        # Retrieved here so asyncio does not warn; the awaiting caller (if any) re-raises it.
        release_logger.debug("background lock call failed: %r", task.exception())


__all__ = ["cancel_count", "finish_shielded", "in_background"]
