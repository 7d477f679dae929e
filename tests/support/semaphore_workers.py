"""Worker processes of the semaphore tests (multiprocessing, spawn): each configures
Django itself with :func:`tests.support.workers.setup_django`."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.support.workers import setup_django


def hold_many(
    redis_url: str, name: str, limit: int, iterations: int, hold: float, start: Any
) -> list[tuple[float, float, int]]:
    """Take a permit ``iterations`` times, hold it ``hold`` s each time; (entered, left,
    fence) per hold, on the system-wide monotonic clock."""
    setup_django(redis_url)
    from django_redislock import Semaphore

    start.wait()
    sections = []
    for _ in range(iterations):
        with Semaphore(name, limit, ttl=10, timeout=60) as permit:
            entered = time.monotonic()
            time.sleep(hold)  # the work done while holding the permit
            sections.append((entered, time.monotonic(), permit.fence or 0))
    return sections


def hold_until_killed(redis_url: str, name: str, limit: int, ttl: float, ready: Any) -> None:
    """Take a permit (no watchdog), say so, and wait to be killed."""
    setup_django(redis_url)
    from django_redislock import Semaphore

    permit = Semaphore(name, limit, ttl=ttl, watchdog=False)
    assert permit.acquire(timeout=10)
    ready.put(permit.token)
    time.sleep(3600)


def wait_for_permit(redis_url: str, name: str, index: int, results: Any) -> None:
    """Wait in line for a permit of ``name`` (limit 1), then report (index, fence, when)."""
    setup_django(redis_url)
    from django_redislock import Semaphore

    permit = Semaphore(name, 1, ttl=10)
    assert permit.acquire(timeout=60), f"waiter {index} gave up"
    results.put((index, permit.fence, time.monotonic(), os.getpid()))
    time.sleep(0.01)
    permit.release()


def longest_wait(redis_url: str, name: str, iterations: int, start: Any) -> float:
    """Take a permit of ``name`` (limit 1) ``iterations`` times, releasing at once; the
    longest any acquire waited (s)."""
    setup_django(redis_url)
    from django_redislock import Semaphore

    start.wait()
    longest = 0.0
    for _ in range(iterations):
        permit = Semaphore(name, 1, ttl=10)
        asked = time.monotonic()
        assert permit.acquire(timeout=60)
        longest = max(longest, time.monotonic() - asked)
        permit.release()
    return longest
