"""LockedTask with real Celery workers: three worker processes (solo, threads, prefork pools)
consuming one queue on a server this module starts, which is also the result backend and
the lock server. Workers are started once for the module; each test uses its own keys."""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from django_redislock import LockLost, LockNotAcquired, force_release
from django_redislock.contrib.celery import LockedTask, is_skipped
from django_redislock.testing import RedisServer
from tests.support import celery_app
from tests.support.celery_runs import (
    REPO,
    RESULT_TIMEOUT,
    enqueue,
    outcomes,
    overlaps,
    read_log,
    runs,
    start_worker,
    stop_workers,
    worker_env,
)
from tests.support.fencing_workers import create_database, read_row
from tests.support.polling import wait_until

#: The third worker alone also consumes the queue ``prefork``: hard time limits need it.
POOLS = (
    ["-P", "solo"],
    ["-P", "threads", "-c", "2"],
    ["-P", "prefork", "-c", "2", "-Q", "celery,prefork"],
)


@dataclass
class Workers:
    server: RedisServer
    db: Path
    procs: list[subprocess.Popen[bytes]]
    #: The lock connection ``lockstore`` of the workers (a server the tests may stop).
    lockstore: RedisServer


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    server = RedisServer().start()
    lockstore = RedisServer().start()
    db = tmp_path_factory.mktemp("celery") / "accounts.sqlite3"
    create_database(str(db))
    env = worker_env(server, db, **{celery_app.LOCKSTORE_ENV: lockstore.url})
    celery_app.configure(server.url)
    procs = [start_worker(pool, env, i) for i, pool in enumerate(POOLS)]
    try:
        # every worker answers a ping
        assert wait_until(lambda: len(celery_app.app.control.ping(timeout=0.5)) == len(POOLS), 60)
        yield Workers(server, db, procs, lockstore)
    finally:
        stop_workers(procs)
        server.close()
        lockstore.close()


@pytest.fixture
def celery(workers: Workers, settings: Any, tmp_path: Path) -> Iterator[Workers]:
    """The test process's locks on the workers' server (the tasks' locks live there)."""
    caches = dict(settings.CACHES)
    caches["default"] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": workers.server.url}
    settings.CACHES = caches
    yield workers


def test_the_overlap_checker_catches_unlocked_runs(celery: Workers, tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    outcomes(enqueue(celery_app.unlocked_task, 10, log, 0.3))
    assert overlaps(runs(log))  # five pool slots, no lock: runs overlap


def test_skip_runs_one_at_a_time_and_the_rest_say_skipped(celery: Workers, tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    results = outcomes(enqueue(celery_app.skip_task, 20, log, 0.3))
    sections = runs(log)
    assert overlaps(sections) == []
    skipped = [result for result in results if is_skipped(result)]
    ran = [result for result in results if isinstance(result, int)]
    assert len(ran) == len(sections) >= 1 and skipped  # five slots: some found it busy
    assert len(ran) + len(skipped) == 20
    assert all(result["lock"].startswith("skip:") for result in skipped)
    assert sorted(ran) == [int(section.fence) for section in sections]  # fences grow
    assert len({section.pid for section in sections}) >= 1


def test_wait_runs_every_task_one_at_a_time(celery: Workers, tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    results = outcomes(enqueue(celery_app.wait_task, 20, log, 0.05))
    sections = runs(log)
    assert len(sections) == 20 and overlaps(sections) == []
    assert [int(s.fence) for s in sections] == sorted(results)  # one holder after another
    assert len({section.pid for section in sections}) >= 2  # more than one worker took part


def test_retry_runs_every_task_later(celery: Workers, tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    results = outcomes(enqueue(celery_app.retry_task, 5, log, 0.2))
    sections = runs(log)
    assert all(isinstance(result, int) for result in results), results
    assert len(sections) == 5 and overlaps(sections) == []
    retried = [line for line in read_log(log) if line[0] == "attempt" and line[4] != "0"]
    assert retried  # five at once on five slots: some had to retry


def test_error_fails_the_busy_runs_with_lock_not_acquired(celery: Workers, tmp_path: Path) -> None:
    log = tmp_path / "events.log"
    results = outcomes(enqueue(celery_app.error_task, 5, log, 0.5))
    sections = runs(log)
    errors = [result for result in results if isinstance(result, Exception)]
    assert overlaps(sections) == []
    assert len(sections) + len(errors) == 5 and errors
    assert all(type(error).__name__ == LockNotAcquired.__name__ for error in errors), errors
    assert "could not acquire lock 'error:" in str(errors[0])


def test_the_held_lock_is_released_after_success_and_failure(celery: Workers) -> None:
    from django_redislock import lock_info

    key = uuid.uuid4().hex[:8]
    celery_app.skip_task.delay(key, "/dev/null", 0).get(timeout=RESULT_TIMEOUT)
    assert lock_info(f"skip:{key}") is None
    result = celery_app.skip_task.delay(key, "/nonexistent/dir/log", 0)  # the body raises
    with pytest.raises(OSError):
        result.get(timeout=RESULT_TIMEOUT)
    assert lock_info(f"skip:{key}") is None


def test_a_retry_from_the_body_releases_the_lock_first(celery: Workers) -> None:
    from django_redislock import lock_info

    key = uuid.uuid4().hex[:8]
    first, second = celery_app.retry_once_task.delay(key).get(timeout=RESULT_TIMEOUT)
    assert second > first  # the retried run took the lock again: it had been released
    assert lock_info(f"again:{key}") is None


def test_a_lost_lock_is_noticed_in_the_task(celery: Workers, tmp_path: Path) -> None:
    from django_redislock.connection import lock_client

    log = tmp_path / "events.log"
    key = uuid.uuid4().hex[:8]
    result = celery_app.lose_task.delay(key, str(log))
    assert wait_until(lambda: read_log(log), 30)
    assert force_release(f"watched:{key}")
    with pytest.raises(LockLost):  # the body returned, but its lock was gone
        result.get(timeout=RESULT_TIMEOUT)
    assert [line[0] for line in read_log(log)] == ["start", "noticed"]
    on_lost = lock_client("default").lrange("on_lost", 0, -1)
    assert on_lost.count(f"watched:{key}".encode()) == 1


def test_a_fenced_write_from_a_task_that_lost_its_lock_is_rejected(
    celery: Workers, tmp_path: Path
) -> None:
    from django_redislock import Lock
    from django_redislock.connection import lock_client

    log = tmp_path / "events.log"
    go = f"go:{uuid.uuid4().hex}"
    stale = celery_app.fenced_deposit.delay(10, str(log), go)  # holds "account" for 0.3 s
    assert wait_until(lambda: read_log(log), 30)
    with Lock("account", timeout=10):  # its TTL ran out (no watchdog): a new holder
        pass
    newer = celery_app.fenced_deposit.delay(100, str(log)).get(timeout=RESULT_TIMEOUT)
    lock_client("default").set(go, 1)  # the paused first task resumes and writes
    with pytest.raises(LockLost):
        stale.get(timeout=RESULT_TIMEOUT)
    events = {line[0]: line for line in read_log(log)}
    assert events["stale"][3] == stale.id  # its write was rejected
    balance, fence = read_row(str(celery.db))
    assert (balance, fence) == (100, newer)


# -- the queued scope ------------------------------------------------------------------


def _go(key: str) -> None:
    from django_redislock.connection import lock_client

    lock_client("default").set(key, 1)


def test_queued_duplicates_get_the_queued_task(celery: Workers, tmp_path: Path) -> None:
    from django_redislock import lock_info

    log = tmp_path / "events.log"
    key, go = uuid.uuid4().hex[:8], f"go:{uuid.uuid4().hex}"
    results = [celery_app.queued_task.delay(key, str(log), go) for _ in range(20)]
    assert {result.id for result in results} == {results[0].id}  # 19 point at the first
    assert lock_info(f"queued:{key}") is not None
    _go(go)
    assert results[0].get(timeout=RESULT_TIMEOUT) == results[0].id
    assert [line[0] for line in read_log(log)] == ["start", "end"]  # one execution
    assert lock_info(f"queued:{key}") is None and lock_info(f"queued:{key}:run") is None
    again = celery_app.queued_task.delay(key, str(log))  # free again: a new task
    assert again.id != results[0].id and again.get(timeout=RESULT_TIMEOUT) == again.id


def test_queued_duplicate_raises_with_on_busy_error(celery: Workers, tmp_path: Path) -> None:
    key, go = uuid.uuid4().hex[:8], f"go:{uuid.uuid4().hex}"
    first = celery_app.queued_error_task.delay(key, "", go)
    with pytest.raises(LockNotAcquired, match=rf"already queued or running .*{first.id}"):
        celery_app.queued_error_task.delay(key, "", go)
    _go(go)
    first.get(timeout=RESULT_TIMEOUT)


def test_a_failed_run_frees_the_queued_key(celery: Workers) -> None:
    from django_redislock import lock_info

    key = uuid.uuid4().hex[:8]
    result = celery_app.queued_task.delay(key, "/nonexistent/dir/log")  # the body raises
    with pytest.raises(OSError):
        result.get(timeout=RESULT_TIMEOUT)
    assert lock_info(f"queued:{key}") is None and lock_info(f"queued:{key}:run") is None


def test_a_marker_that_cannot_be_adopted_still_frees_the_run_lock(celery: Workers) -> None:
    from django_redislock import Lock, LockConfigurationError, lock_info
    from django_redislock.connection import lock_client

    key = uuid.uuid4().hex[:8]
    result = celery_app.queued_task.apply_async((key, ""), countdown=1)
    # The queued marker's key becomes another type while the task waits: adopting it in
    # the worker fails (WRONGTYPE) after the run lock was taken.
    marker_key = Lock(f"queued:{key}").key
    client = lock_client("default")
    client.delete(marker_key)
    client.zadd(marker_key, {"not-a-lock": 1})
    with pytest.raises(LockConfigurationError):
        result.get(timeout=RESULT_TIMEOUT)
    assert lock_info(f"queued:{key}:run") is None  # released, not renewed on and on
    client.delete(marker_key)


def test_a_revoked_queued_task_frees_its_key(celery: Workers, tmp_path: Path) -> None:
    from django_redislock import lock_info

    key = uuid.uuid4().hex[:8]
    result = celery_app.queued_task.apply_async((key, str(tmp_path / "log")), countdown=1)
    result.revoke()
    assert wait_until(lambda: lock_info(f"queued:{key}") is None, 20)
    assert not (tmp_path / "log").exists()  # it never ran
    assert celery_app.queued_task.delay(key, str(tmp_path / "log")).id != result.id


def test_a_task_nobody_runs_frees_its_key_after_queued_ttl(celery: Workers) -> None:
    from django_redislock import lock_info

    key = uuid.uuid4().hex[:8]
    first = celery_app.short_queued_task.apply_async((key,), queue="nobody-consumes-this")
    assert celery_app.short_queued_task.apply_async((key,), queue="nobody").id == first.id
    assert wait_until(lambda: lock_info(f"queued:{key}") is None, 10)  # queued_ttl=1
    again = celery_app.short_queued_task.delay(key)
    assert again.id != first.id and again.get(timeout=RESULT_TIMEOUT) == again.id


def _define(task_name: str, lock: dict[str, Any]) -> Any:
    def body(x: int) -> int:
        return x

    task = celery_app.app.task(name=task_name, base=LockedTask, lock=lock, shared=False)(body)
    return task.name  # a proxy until the app is finalized: this makes Celery build the task


@pytest.mark.parametrize(
    ("lock", "message"),
    [
        ({"on_busy": "later"}, r"task 'bad'.*on_busy must be one of skip, retry, error, wait"),
        ({"scope": "queued", "on_busy": "retry"}, r"on_busy must be one of skip, error, wait"),
        ({"scope": "now"}, r"scope must be one of running, queued, not 'now'"),
        ({"on_busy": "wait"}, r"on_busy='wait' needs a timeout"),
        ({"colour": "red"}, r"Unknown lock option\(s\) colour"),
        ({"on_lost": print}, r"on_lost cannot be set"),
        ({"ttl": 0}, r"'ttl' must be > 0"),
        ({"name": "n:{y}"}, r"uses \{y\}, which is not a parameter"),
        ({"key_args": ["y"]}, r"key_args names no parameter of the task: \['y'\]"),
    ],
)
def test_bad_lock_options_fail_when_the_task_is_defined(lock: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _define("bad", lock)


def test_key_args_name_the_lock_after_the_arguments() -> None:
    from django_redislock.contrib.celery.options import parse

    def body(report_id: int, fmt: str = "pdf", **extra: Any) -> None:
        pass

    every = parse("reports.build", body, {"key_args": "all"})
    assert every.lock_name((7,), {}) == "reports.build:fmt='pdf',report_id=7"
    chosen = parse("reports.build", body, {"key_args": ["report_id"]})
    assert chosen.lock_name((7, "csv"), {}) == "reports.build:report_id=7"
    hashed = every.lock_name((7,), {"data": {"a": 1}})  # braces: a digest instead
    assert hashed.startswith("reports.build#")
    assert hashed == every.lock_name((7,), {"data": {"a": 1}})
    assert parse("t", body, {}).lock_name((7,), {}) == "t"  # default: the task's name
    template = parse("t", body, {"name": "report:{report_id}:{fmt}"})
    assert template.lock_name((7,), {}) == "report:7:pdf"
    by_callable = parse("t", body, {"name": lambda report_id, **kw: f"r{report_id}"})
    assert by_callable.lock_name((8,), {}) == "r8"


def test_importing_django_redislock_does_not_import_celery() -> None:
    code = "import sys, django_redislock; print('celery' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.stdout.strip() == "False", out.stderr


# -- workers that die, time limits, redelivery ---------------------------------------


@pytest.fixture
def spare_workers(celery: Workers) -> Iterator[Any]:
    """``start(queue, count, **env)``: more workers (solo pool) on a queue of their own."""
    started: list[subprocess.Popen[bytes]] = []

    def start(queue: str, count: int = 1, **extra: str) -> list[subprocess.Popen[bytes]]:
        env = worker_env(celery.server, celery.db, **extra)
        procs = [
            start_worker(["-P", "solo", "-Q", queue], env, f"{queue}{i}") for i in range(count)
        ]
        started.extend(procs)
        total = len(POOLS) + len(started)
        assert wait_until(lambda: len(celery_app.app.control.ping(timeout=0.5)) == total, 60)
        return procs

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def _pttl(celery: Workers, name: str) -> int:
    with celery.server.client() as client:
        return int(client.pttl(f"redislock:{{{name}}}"))


def _free_after_holder_died(celery: Workers, name: str) -> None:
    """The dead holder's lock is not renewed: at most one TTL left, counting down, then gone
    (it may be gone already when the test learns of the death)."""
    ttls = [_pttl(celery, name)]
    assert wait_until(lambda: ttls.append(_pttl(celery, name)) or ttls[-1] == -2, 10)
    left = [ttl for ttl in ttls if ttl != -2]
    # PTTL is 0 in the last millisecond before the key expires.
    assert all(0 <= ttl <= 1000 for ttl in left), ttls  # SHORT: ttl=1.0
    assert left == sorted(left, reverse=True)  # only ever counting down: nobody renewed it


def test_a_sigkilled_worker_leaves_the_key_for_one_ttl(
    celery: Workers, spare_workers: Any, tmp_path: Path
) -> None:
    log = tmp_path / "events.log"
    key, queue = uuid.uuid4().hex[:8], f"doomed-{uuid.uuid4().hex[:6]}"
    (doomed,) = spare_workers(queue)
    never = f"never:{uuid.uuid4().hex}"
    celery_app.hold_task.apply_async((key, str(log), never), queue=queue)
    assert wait_until(lambda: read_log(log), 30)
    doomed.send_signal(signal.SIGKILL)  # solo pool: the task dies with the worker
    doomed.wait(10)
    _free_after_holder_died(celery, f"hold:{key}")
    go = f"go:{uuid.uuid4().hex}"
    _go(go)
    assert isinstance(celery_app.hold_task.delay(key, str(log), go).get(RESULT_TIMEOUT), int)


def test_a_task_past_its_hard_time_limit_leaves_the_key_for_one_ttl(
    celery: Workers, tmp_path: Path
) -> None:
    log = tmp_path / "events.log"
    key = uuid.uuid4().hex[:8]
    limited = celery_app.limited_task.apply_async((key, str(log)), queue="prefork")
    assert wait_until(lambda: read_log(log), 30)
    with pytest.raises(Exception, match=r"TimeLimitExceeded|Time limit"):
        limited.get(timeout=RESULT_TIMEOUT)  # the pool killed the process
    _free_after_holder_died(celery, f"hold:{key}")
    go = f"go:{uuid.uuid4().hex}"
    _go(go)
    assert isinstance(celery_app.hold_task.delay(key, str(log), go).get(RESULT_TIMEOUT), int)


@pytest.mark.parametrize("task", ["late_unlocked_task", "late_task"])
def test_acks_late_redelivery_does_not_run_one_key_twice(
    celery: Workers, spare_workers: Any, tmp_path: Path, task: str
) -> None:
    """The broker hands a message still running (unacked past the visibility timeout) to a
    second worker: without the lock both run at once, which the checker must see."""
    log = tmp_path / "events.log"
    queue = f"late-{uuid.uuid4().hex[:6]}"
    spare_workers(queue, 2, **{celery_app.VISIBILITY_ENV: "1", celery_app.QUEUE_ENV: queue})
    with celery.server.client() as client:  # what a worker killed mid-sweep leaves behind
        client.set("unacked_mutex", "stale", ex=60)  # the shared default mutex, held
    getattr(celery_app, task).apply_async(("k", str(log)), queue=queue)

    def events(kind: str) -> list[list[str]]:
        return [line for line in read_log(log) if line[0] == kind]

    # delivered twice (to both workers), and every run that started has ended
    assert wait_until(lambda: len({line[2] for line in events("delivered")}) == 2, 30), read_log(
        log
    )
    assert wait_until(lambda: len(events("end")) == len(events("start")), 30), read_log(log)
    sections = runs(log)
    if task == "late_unlocked_task":
        assert len(sections) == 2 and overlaps(sections)  # the same message ran twice at once
    else:
        assert len(sections) == 1  # the second delivery found the key busy and skipped


# -- one celery beat across hosts: redislock run ---------------------------------------


def test_one_celery_beat_at_a_time_under_redislock_run(celery: Workers, tmp_path: Path) -> None:
    """docs/election.md's recipe with a real beat: the second host is refused while the
    first runs beat; SIGTERM stops beat before the lock is let go; then the next one runs."""
    import psutil

    from django_redislock import lock_info

    env = {**worker_env(celery.server, celery.db), "REDISLOCK_TEST_REDIS_URL": celery.server.url}
    beat = ["--", sys.executable, "-m", "celery", "-A", "tests.support.celery_app", "beat"]
    run = [sys.executable, "manage.py", "redislock", "run"]

    def host(name: str) -> subprocess.Popen[str]:
        schedule = ["-s", str(tmp_path / f"{name}-schedule"), "--pidfile=", "-l", "warning"]
        with (tmp_path / f"{name}.err").open("w") as err:  # the child keeps its own copy
            return subprocess.Popen(
                [*run, "celery-beat", "--ttl", "2", *beat, *schedule],
                cwd=REPO,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
            )

    def runs_beat(proc: subprocess.Popen[str]) -> bool:
        children = psutil.Process(proc.pid).children()
        return any("beat" in child.cmdline() for child in children)

    first = host("first")
    try:
        assert wait_until(lambda: runs_beat(first) and lock_info("celery-beat") is not None, 60)
        second = host("second")
        # busy: another host runs beat
        assert second.wait(60) == 75, (tmp_path / "second.err").read_text()
        first.send_signal(signal.SIGTERM)
        first.wait(60)
        assert lock_info("celery-beat") is None  # released once beat had exited
        third = host("third")
        assert wait_until(lambda: runs_beat(third), 60)  # the next host takes over
        third.send_signal(signal.SIGTERM)
        third.wait(60)
    finally:
        for proc in (first, locals().get("third")):
            if proc is not None and proc.poll() is None:
                # Beat runs in its own session: killing the supervisor alone would orphan it.
                beats = psutil.Process(proc.pid).children(recursive=True)
                proc.kill()
                proc.wait(10)
                for beat_process in beats:
                    beat_process.kill()
                psutil.wait_procs(beats, timeout=10)


def test_lock_server_down_retries_until_it_is_back(celery: Workers) -> None:
    """on_unavailable="retry": the run is retried (Celery's retry, with its countdown)
    while the lock server is down, and runs once it is back."""
    celery.lockstore.stop()
    try:
        result = celery_app.unavailable_retry_task.delay(uuid.uuid4().hex)
        assert wait_until(lambda: result.state == "RETRY", RESULT_TIMEOUT)
    finally:
        celery.lockstore.restart()
    assert result.get(timeout=RESULT_TIMEOUT) >= 1


def test_lock_server_down_fails_the_run_by_default(celery: Workers) -> None:
    celery.lockstore.stop()
    try:
        result = celery_app.unavailable_error_task.delay(uuid.uuid4().hex)
        with pytest.raises(Exception, match="lockstore") as caught:
            result.get(timeout=RESULT_TIMEOUT)
        assert type(caught.value).__name__ == "LockBackendUnavailable"
    finally:
        celery.lockstore.restart()
    again = celery_app.unavailable_error_task.delay(uuid.uuid4().hex)
    assert again.get(timeout=RESULT_TIMEOUT) == 0
