"""MultiLock across processes, on each real server: 6 processes each move money between two
of four accounts picked in random order; the total stays constant and nothing deadlocks
(each MultiLock waits at most its timeout). Without the MultiLock the same checker sees
money appear or vanish. The same on Redis Cluster: tests/test_cluster.py."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from django_redislock import lock_info
from tests.support import multilock_workers as workers

pytestmark = pytest.mark.slow

PROCESSES = 6
MOVES = 30
ACCOUNTS = ["account:1", "account:2", "account:3", "account:4"]

CTX = multiprocessing.get_context("spawn")


def run_bank(url: str, db_path: str, accounts: list[str], *, protect: bool = True,
             cluster: bool = False) -> list[Any]:  # fmt: skip
    workers.open_bank(db_path, accounts)
    with CTX.Manager() as manager, CTX.Pool(PROCESSES) as pool:
        start = manager.Barrier(PROCESSES)
        args = [
            (url, db_path, accounts, MOVES, seed, start, protect, cluster)
            for seed in range(PROCESSES)
        ]
        return [
            f for fences in pool.starmap_async(workers.move_money, args).get(100) for f in fences
        ]


def check_bank(db_path: str, moves: list[Any]) -> None:
    total = sum(workers.balances(db_path).values())
    assert total == workers.START_BALANCE * len(workers.balances(db_path))  # nothing lost
    assert len(moves) == PROCESSES * MOVES  # every move done: no deadlock, no timeout
    per_name: dict[str, list[int]] = {}
    for fences in moves:
        for name, fence in fences.items():
            per_name.setdefault(name, []).append(fence)
    for fences in per_name.values():  # each account's lock: one fence per move
        assert len(set(fences)) == len(fences)


def test_money_moves_and_the_total_stays(real_backend: Any, tmp_path: Path) -> None:
    db_path = str(tmp_path / "bank.sqlite")
    moves = run_bank(real_backend.url, db_path, ACCOUNTS)
    check_bank(db_path, moves)
    assert all(lock_info(name) is None for name in ACCOUNTS)


def test_the_checker_catches_lost_money(make_server: Any, tmp_path: Path) -> None:
    # Lost updates need two moves to interleave, which a run of unlucky scheduling may
    # not give: up to three banks, and one must show money appeared or vanished.
    server = make_server()
    totals = []
    for attempt in range(3):
        db_path = str(tmp_path / f"bank{attempt}.sqlite")
        run_bank(server.url, db_path, ACCOUNTS, protect=False)
        totals.append(sum(workers.balances(db_path).values()))
        if totals[-1] != workers.START_BALANCE * len(ACCOUNTS):
            break
    assert totals[-1] != workers.START_BALANCE * len(ACCOUNTS), totals
