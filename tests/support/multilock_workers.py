"""Worker processes of the MultiLock tests (multiprocessing, spawn): money moved between
accounts kept in a SQLite file, each move under a MultiLock over its two accounts."""

from __future__ import annotations

import contextlib
import random
import sqlite3
import time
from typing import Any

from tests.support.workers import setup_django

START_BALANCE = 1000


def open_bank(path: str, accounts: list[str]) -> None:
    """The accounts, each with START_BALANCE."""
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE account (name TEXT PRIMARY KEY, balance INT)")
        db.executemany("INSERT INTO account VALUES (?, ?)", [(a, START_BALANCE) for a in accounts])


def balances(path: str) -> dict[str, int]:
    with sqlite3.connect(path) as db:
        return dict(db.execute("SELECT name, balance FROM account").fetchall())


def move_money(
    redis_url: str, db_path: str, accounts: list[str], moves: int, seed: int, start: Any,
    protect: bool = True, cluster: bool = False,
) -> list[dict[str, int | None]]:  # fmt: skip
    """``moves`` transfers between two accounts picked at random (in random order): read
    both balances, write both back. ``protect=False``: without the MultiLock (the checker's
    control: updates get lost). Returns each move's fences."""
    if cluster:
        setup_django(
            redis_url,
            CONNECTION="locks",
            CONNECTIONS={"locks": {"URL": redis_url, "CLUSTER": True}},
        )
    else:
        setup_django(redis_url)
    from django_redislock import MultiLock

    rng = random.Random(seed)
    db = sqlite3.connect(db_path, timeout=30, isolation_level=None)  # each statement commits
    start.wait()
    fences = []
    for _ in range(moves):
        payer, payee = rng.sample(accounts, 2)
        amount = rng.randint(1, 10)
        guard = MultiLock([payer, payee], ttl=10, timeout=60) if protect else None
        with guard if guard is not None else contextlib.nullcontext():
            (paid,) = db.execute("SELECT balance FROM account WHERE name = ?", (payer,)).fetchone()
            (got,) = db.execute("SELECT balance FROM account WHERE name = ?", (payee,)).fetchone()
            time.sleep(0.002)  # the work between reading and writing
            db.execute("UPDATE account SET balance = ? WHERE name = ?", (paid - amount, payer))
            db.execute("UPDATE account SET balance = ? WHERE name = ?", (got + amount, payee))
        fences.append(guard.fences if guard is not None else {})
    db.close()
    return fences
