"""Worker processes for the fencing and transaction tests (spawned; Django set up here).

They share one SQLite file (WAL, busy timeout) with a counter row, through the ORM.
"""

from __future__ import annotations

import sqlite3
from typing import Any

SCHEMA = "CREATE TABLE fencing_account (id INTEGER PRIMARY KEY, balance INTEGER, fence BIGINT)"


def create_database(path: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(SCHEMA)
        db.execute("INSERT INTO fencing_account VALUES (1, 0, 0)")


def read_row(path: str) -> tuple[int, int]:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT balance, fence FROM fencing_account WHERE id = 1").fetchone()


def setup(redis_url: str, db_path: str, **redislock: Any) -> Any:
    """Configure Django with the test Redis and the shared SQLite file; return the model."""
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django_redislock"],
        CACHES={"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": redis_url}},
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": db_path,
                "OPTIONS": {"timeout": 30},
            }
        },
        REDISLOCK={"TTL": 5.0, **redislock},
        USE_TZ=True,
    )
    django.setup()
    from django.db import models

    from django_redislock.fencing import FencedModel

    class Account(FencedModel):
        balance = models.IntegerField(default=0)

        class Meta:
            app_label = "django_redislock"
            db_table = "fencing_account"
            managed = False

    return Account


def paused_writer(redis_url: str, db_path: str, guarded: bool, inbox: Any, outbox: Any) -> None:
    """Acquire, read, report ready, wait (the test SIGSTOPs us here), then write +10."""
    account = setup(redis_url, db_path)
    from django_redislock import Lock, StaleFence
    from django_redislock.fencing import fenced_update

    lock = Lock("account", ttl=0.3)
    lock.acquire()
    balance = account.objects.get(pk=1).balance
    outbox.put(("ready", lock.fence))
    inbox.get()  # "go", sent after we were resumed
    rows = account.objects.filter(pk=1)
    try:
        if guarded:
            fenced_update(rows, lock, balance=balance + 10)
        else:
            rows.update(balance=balance + 10)
        outbox.put(("written", lock.fence))
    except StaleFence:
        outbox.put(("stale", lock.fence))


def new_holder_writer(redis_url: str, db_path: str, outbox: Any) -> None:
    """Take the lock after the paused holder's TTL ran out and write +100, fenced."""
    account = setup(redis_url, db_path)
    from django_redislock import Lock
    from django_redislock.fencing import fenced_update

    with Lock("account", ttl=5, timeout=10) as lock:
        balance = account.objects.get(pk=1).balance
        fenced_update(account.objects.filter(pk=1), lock, balance=balance + 100)
        outbox.put(("written", lock.fence))


def atomic_incrementer(
    redis_url: str, db_path: str, iterations: int, release_after_commit: bool
) -> tuple[int, int]:
    """Increment the balance inside atomic() through locked code; return (done, errors)."""
    account = setup(redis_url, db_path, RELEASE_AFTER_COMMIT=release_after_commit)
    from django.db import OperationalError, transaction

    from django_redislock import Lock

    done = errors = 0
    for _ in range(iterations):
        try:
            with transaction.atomic():
                with Lock("counter", ttl=10, timeout=60):
                    row = account.objects.get(pk=1)
                    account.objects.filter(pk=1).update(balance=row.balance + 1)
                # More work in the same transaction after the locked section.
                account.objects.filter(pk=1).exists()
            done += 1
        except OperationalError:
            errors += 1
    return done, errors
