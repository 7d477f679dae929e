"""Celery worker processes and what their tasks logged: shared by the Celery tests.

Workers run ``python -m celery -A tests.support.celery_app worker`` with the pool given;
the tasks append ``start``/``end`` lines to a log file, read back as critical sections.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django_redislock.testing import RedisServer
from tests.support import celery_app

REPO = Path(__file__).resolve().parents[2]
RESULT_TIMEOUT = 60


def start_worker(pool: list[str], env: dict[str, str], index: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tests.support.celery_app",
            "worker",
            *pool,
            "-n",
            f"w{index}-{os.getpid()}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-l",
            "warning",
        ],
        env=env,
        cwd=REPO,
    )


def worker_env(server: RedisServer, db: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        celery_app.URL_ENV: server.url,
        celery_app.DB_ENV: str(db),
        **extra,
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return env


def stop_workers(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass(frozen=True)
class Run:
    task_id: str
    pid: int
    start: int
    end: int
    fence: str


def read_log(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines()]


def runs(path: Path) -> list[Run]:
    """The critical sections in the log, by start time."""
    started: dict[str, list[str]] = {}
    done = []
    for event, stamp, pid, task_id, *rest in read_log(path):
        if event == "start":  # a redelivered message runs again under the same task id
            started[pid + task_id] = [stamp, pid, *rest]
        elif event == "end":
            first, pid0, *detail = started.pop(pid + task_id)
            done.append(Run(task_id, int(pid0), int(first), int(stamp), " ".join(detail)))
    return sorted(done, key=lambda run: run.start)


def overlaps(sections: list[Run]) -> list[str]:
    """Every pair of sections that ran at the same time (they should run one at a time)."""
    problems = []
    for before, after in itertools.pairwise(sections):
        if after.start < before.end:
            problems.append(f"{after.task_id} started before {before.task_id} ended")
    return problems


def enqueue(task: Any, count: int, log: Path, seconds: float, key: str | None = None) -> list[Any]:
    key = key or uuid.uuid4().hex[:8]
    return [task.delay(key, str(log), seconds) for _ in range(count)]


def outcomes(results: list[Any]) -> list[Any]:
    return [result.get(timeout=RESULT_TIMEOUT, propagate=False) for result in results]
