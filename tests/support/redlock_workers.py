"""Code that runs in worker processes of the Redlock tests (multiprocessing, spawn)."""

from __future__ import annotations

import contextlib
import time
from typing import Any


def setup_django(urls: list[str], **redislock: Any) -> list[str]:
    """Configure Django in this (spawned) process with one cache alias per node."""
    import django
    from django.conf import settings

    aliases = [f"rl{i}" for i in range(len(urls))]
    if not settings.configured:
        caches = {
            alias: {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
            for alias, url in zip(aliases, urls, strict=True)
        }
        caches["default"] = caches[aliases[0]]
        settings.configure(
            INSTALLED_APPS=["django_redislock"],
            CACHES=caches,
            REDISLOCK={"TTL": 5.0, "REDLOCK_CONNECTIONS": aliases, **redislock},
            USE_TZ=True,
        )
        django.setup()
    return aliases


def race_worker(
    urls: list[str],
    name: str,
    duration: float,
    ttl: float,
    hold: float,
    ready: Any,
    go: Any,
    start_at: Any,
    results: Any,
) -> None:
    """Take the Redlock again and again for ``duration`` seconds from ``start_at``.

    Puts a list of (start, end, fence) per critical section on ``results``; ``start`` is
    taken after the acquire returned and ``end`` before the release is sent
    (time.monotonic is system-wide on Linux, so sections of different processes compare).
    """
    try:
        results.put(_race(urls, name, duration, ttl, hold, ready, go, start_at))
    except BaseException as exc:  # reported by the test instead of a silent queue timeout
        results.put(f"worker failed: {exc!r}")
        raise


def _race(
    urls: list[str],
    name: str,
    duration: float,
    ttl: float,
    hold: float,
    ready: Any,
    go: Any,
    start_at: Any,
) -> list[tuple[float, float, int]]:
    setup_django(urls)
    from django_redislock import LockBackendUnavailable, Redlock

    lock = Redlock(name, ttl=ttl)
    with contextlib.suppress(Exception):  # warm up connections and the loop thread
        if lock.acquire(timeout=0):
            lock.release()
    ready.wait()
    go.wait()
    end_at = start_at.value + duration
    while time.monotonic() < start_at.value:
        pass
    sections = []
    while time.monotonic() < end_at:
        try:
            if not lock.acquire(timeout=max(0.0, end_at - time.monotonic())):
                continue
        except LockBackendUnavailable:  # a starved machine: nodes too slow this once
            continue
        start = time.monotonic()
        assert lock.fence is not None
        deadline = min(start + hold, lock.valid_until or start)
        while time.monotonic() < deadline:
            pass  # busy critical section
        end = time.monotonic()
        sections.append((start, end, lock.fence))
        with contextlib.suppress(Exception):  # expired meanwhile: recorded all the same
            lock.release()
    return sections
