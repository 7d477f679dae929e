"""Worker processes of the waiter tests (multiprocessing, spawn): each takes or waits
for one lock of a kind, with a purpose that tells it apart, and reports through a queue."""

from __future__ import annotations

import os
import time
from typing import Any

from tests.support.workers import setup_django


def _lock(kind: str, name: str, purpose: str, limit: int) -> Any:
    from django_redislock import Lock, ReadWriteLock, Semaphore

    if kind == "lock":
        return Lock(name, ttl=30, purpose=purpose)
    if kind == "semaphore":
        return Semaphore(name, limit, ttl=30, purpose=purpose)
    side = ReadWriteLock(name, ttl=30, purpose=purpose)
    return side.read_lock() if kind == "read" else side.write_lock()


def hold(redis_url: str, kind: str, name: str, purpose: str, limit: int, ready: Any) -> None:
    """Take the lock at once, say so (pid), and hold it until killed."""
    setup_django(redis_url)
    lock = _lock(kind, name, purpose, limit)
    assert lock.acquire(timeout=0)
    ready.put((purpose, os.getpid()))
    time.sleep(3600)


def wait(redis_url: str, kind: str, name: str, purpose: str, limit: int, ready: Any) -> None:
    """Wait for the lock (up to a minute), say when it was granted, and hold it until
    killed."""
    setup_django(redis_url)
    lock = _lock(kind, name, purpose, limit)
    ready.put((purpose, os.getpid()))
    granted = lock.acquire(timeout=60)
    ready.put((purpose, "granted" if granted else "gave up"))
    time.sleep(3600)
