"""Code that runs in worker processes started by tests (multiprocessing, spawn).

Each worker configures Django itself, pointing the default cache at the URL it
is given, then does locked read-modify-writes on a shared SQLite row that only
accepts a write whose fence is higher than the stored one.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any


def setup_django(redis_url: str, **redislock: Any) -> None:
    """Configure a minimal Django in this (spawned) process."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            INSTALLED_APPS=["django_redislock"],
            CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}},
            REDISLOCK={"TTL": 5.0, **redislock},
            USE_TZ=True,
        )
        django.setup()


def create_resource(path: str) -> None:
    """The protected resource: one row with a counter and the last accepted fence."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE resource (id INTEGER PRIMARY KEY, counter INT, fence INT)")
        db.execute("INSERT INTO resource VALUES (1, 0, 0)")


def fenced_increment(db: sqlite3.Connection, fence: int) -> bool:
    """Read the counter, write counter+1 only if ``fence`` is newer than the stored one."""
    (counter,) = db.execute("SELECT counter FROM resource WHERE id = 1").fetchone()
    cursor = db.execute(
        "UPDATE resource SET counter = ?, fence = ? WHERE id = 1 AND fence < ?",
        (counter + 1, fence, fence),
    )
    db.commit()
    return cursor.rowcount == 1


def increment_worker(redis_url: str, db_path: str, name: str, iterations: int) -> list[Any]:
    """Take the lock ``iterations`` times; return (start, end, fence, accepted) per section."""
    setup_django(redis_url)
    from django_redislock import Lock

    db = sqlite3.connect(db_path, timeout=30, isolation_level="DEFERRED")
    history = []
    for _ in range(iterations):
        with Lock(name, ttl=10, timeout=60) as lock:
            start = time.monotonic()
            accepted = fenced_increment(db, lock.fence)
            end = time.monotonic()
        history.append((start, end, lock.fence, accepted))
    db.close()
    return history
