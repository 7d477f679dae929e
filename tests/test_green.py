"""gevent and eventlet workers: real monkey-patched processes, patched before any import.

- contention: 4 processes x 20 greenlets on one name, every section checked for overlap
  (the checker shown to catch unlocked runs), waiters woken by releases;
- the watchdog as a greenlet: renewing across a long cooperative sleep, and starved by a
  CPU-bound greenlet (``lost`` in time, ``on_lost`` once);
- ``LockedTask`` under ``celery worker --pool gevent`` / ``eventlet``;
- ``lock_view`` under ``gunicorn -k gevent``.

The package itself never imports gevent or eventlet (``test_the_package_never_imports_them``).
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django_redis import get_redis_connection

from django_redislock.lock import MAX_SUBSCRIBED_WAIT
from django_redislock.testing import RedisServer
from tests.support import celery_app
from tests.support.celery_runs import (
    enqueue,
    outcomes,
    overlaps,
    runs,
    start_worker,
    stop_workers,
    worker_env,
)
from tests.support.fencing_workers import create_database
from tests.support.gunicorn import get, gunicorn
from tests.support.plugin import URL_ENV
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "support" / "green_worker.py"
LIBRARIES = ["gevent", "eventlet"]


def _env(**extra: str) -> dict[str, str]:
    # eventlet warns on import that it is deprecated: not this suite's concern.
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore", **extra}


def _worker(library: str, scenario: str, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), library, scenario, str(out), *args],
        cwd=ROOT,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _report(proc: subprocess.Popen[str], out: Path, timeout: float = 100) -> dict[str, Any]:
    stdout, stderr = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, stdout[-2000:] + stderr[-3000:]
    report: dict[str, Any] = json.loads(out.read_text())
    assert report["patched"], report  # the scenario really ran on greenlets
    return report


# -- contention -------------------------------------------------------------------------

PROCESSES, GREENLETS = 4, 20


def _contend(library: str, tmp_path: Path, locked: bool, iterations: int) -> list[list[float]]:
    """Every process's sections, started together (one "go" item each)."""
    name, go = f"green-{uuid.uuid4().hex[:8]}", f"go:{uuid.uuid4().hex[:8]}"
    mode = "locked" if locked else "unlocked"
    outs = [tmp_path / f"contend-{i}.json" for i in range(PROCESSES)]
    args = (name, str(GREENLETS), str(iterations), mode, go)
    procs = [_worker(library, "contend", out, *args) for out in outs]
    redis = get_redis_connection("default")
    try:
        assert wait_until(lambda: redis.llen(f"{go}:ready") == PROCESSES, 60)
        redis.rpush(go, *["go"] * PROCESSES)
        reports = [_report(proc, out) for proc, out in zip(procs, outs, strict=True)]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return sorted(section for report in reports for section in report["sections"])


def _overlapping(sections: list[list[float]]) -> int:
    return sum(after[0] < before[1] for before, after in itertools.pairwise(sections))


@pytest.mark.parametrize("library", LIBRARIES)
def test_the_overlap_checker_catches_unlocked_greenlets(library: str, tmp_path: Path) -> None:
    sections = _contend(library, tmp_path, locked=False, iterations=3)
    assert len(sections) == PROCESSES * GREENLETS * 3
    assert _overlapping(sections) > 0


@pytest.mark.parametrize("library", LIBRARIES)
def test_greenlets_in_four_processes_take_turns(library: str, tmp_path: Path) -> None:
    iterations = 10
    sections = _contend(library, tmp_path, locked=True, iterations=iterations)
    assert len(sections) == PROCESSES * GREENLETS * iterations  # every acquisition completed
    assert _overlapping(sections) == 0
    # Woken by the release, not by a timer: the typical hand-off takes a small fraction
    # of the safety-net interval a waiter would otherwise sleep for.
    gaps = [after[0] - before[1] for before, after in itertools.pairwise(sections)]
    assert statistics.median(gaps) < MAX_SUBSCRIBED_WAIT / 20, statistics.median(gaps)


# -- the watchdog as a greenlet ---------------------------------------------------------


@pytest.mark.parametrize("library", LIBRARIES)
def test_watchdog_renews_across_sleep_and_reports_starvation(library: str, tmp_path: Path) -> None:
    out = tmp_path / "watchdog.json"
    report = _report(_worker(library, "watchdog", out), out)
    ttl = report["ttl"]
    # Held for three TTLs of cooperative sleep: renewed all along (the same hold without
    # the watchdog, alongside, expired: what the check would see if renewals stopped).
    assert report["sleep_lost"] is False and report["sleep_pttl"] > 0
    assert report["unwatched_lost"] is True and report["unwatched_pttl"] == -2
    # Starved for 2.5 TTLs by a greenlet that never yields: the lock's validity ended no
    # later than the key could expire (one TTL after the attempt was sent), and the
    # CPU-bound code saw lost turn True while it still ran (not before the validity ended);
    # then check() raises, on_lost ran exactly once, and the key is gone from Redis.
    assert report["starved_lost"] is True
    assert report["valid_for"] is not None and report["valid_for"] <= ttl + 1e-9  # (rounding)
    assert report["lost_seen_after"] is not None
    assert report["lost_seen_after"] >= report["valid_for"]
    assert report["check"] == "LockLost"
    assert report["on_lost_called"] is True and report["on_lost_calls"] == 1
    assert report["starved_pttl"] == -2
    assert report["release"] == "LockNotOwned"


# -- Celery -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def celery_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, Path]]:
    """One broker for the module: the Celery app of this process keeps its connections."""
    server = RedisServer().start()
    db = tmp_path_factory.mktemp("green-celery") / "accounts.sqlite3"
    create_database(str(db))
    celery_app.configure(server.url)
    try:
        yield server, db
    finally:
        server.close()


@pytest.fixture
def green_celery(
    request: pytest.FixtureRequest, celery_server: tuple[RedisServer, Path]
) -> Iterator[RedisServer]:
    """Two workers with the green pool in ``request.param``, 10 greenlets each."""
    library = request.param
    server, db = celery_server
    env = worker_env(server, db, PYTHONWARNINGS="ignore")
    procs = [start_worker(["-P", library, "-c", "10"], env, f"{library}{i}") for i in range(2)]
    try:
        assert wait_until(lambda: len(celery_app.app.control.ping(timeout=0.5)) == 2, 60)
        yield server
    finally:
        stop_workers(procs)


@pytest.mark.parametrize("green_celery", LIBRARIES, indirect=True)
def test_locked_task_on_a_green_pool(
    green_celery: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    library = request.node.callspec.params["green_celery"]
    module = celery_app.socket_module.delay().get(timeout=60)
    assert module.startswith(library), module  # the worker runs monkey-patched
    unlocked = tmp_path / "unlocked.log"
    outcomes(enqueue(celery_app.unlocked_task, 10, unlocked, 0.2))
    assert overlaps(runs(unlocked))  # the checker catches the same work unlocked
    log = tmp_path / "locked.log"
    results = outcomes(enqueue(celery_app.wait_task, 20, log, 0.02))
    sections = runs(log)
    assert len(sections) == 20 and overlaps(sections) == []
    assert [int(s.fence) for s in sections] == sorted(results)
    assert len({section.pid for section in sections}) == 2  # both workers took part


# -- gunicorn -k gevent -----------------------------------------------------------------


@pytest.fixture
def gunicorn_gevent() -> Iterator[str]:
    """``gunicorn -k gevent``, 2 workers, serving ``tests.support.green_site``."""
    with gunicorn(
        "-k", "gevent", "-w", "2", "--worker-connections", "100",
        env=_env(DJANGO_SETTINGS_MODULE="tests.support.green_site"),
        ready="/counter/",
    ) as url:  # fmt: skip
        yield url


def _requests(url: str, count: int) -> list[str | None]:
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(get, [url] * count))


def test_lock_view_under_gunicorn_gevent(gunicorn_gevent: str) -> None:
    from tests.support.green_site import COUNTER

    redis = get_redis_connection("default")
    assert os.environ[URL_ENV]  # gunicorn's workers use the same server
    requests = 48
    _requests(gunicorn_gevent + "/unlocked/", requests)
    assert int(redis.get(COUNTER)) < requests  # lost updates without the lock
    redis.delete(COUNTER)
    answers = _requests(gunicorn_gevent + "/locked/", requests)
    assert int(redis.get(COUNTER)) == requests  # exact
    assert sorted(int(a) for a in answers if a is not None) == list(range(1, requests + 1))


def test_the_package_never_imports_them() -> None:
    code = (
        "import sys, django_redislock, django_redislock.lock, django_redislock.waiting;"
        "import django_redislock.watchdog, django_redislock.decorators;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('gevent', 'eventlet')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=_env(DJANGO_SETTINGS_MODULE="tests.support.settings"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
