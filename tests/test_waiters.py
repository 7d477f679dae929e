"""Who waits for a lock, for every kind: ``lock_info().waiters`` lists each waiting
process with its owner and purpose, longest waiting first; ``held_locks()`` counts them;
a waiter that is killed stops showing once its place lapses (docs/observability.md)."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import os
import signal
from collections.abc import Iterator
from typing import Any

import pytest

from django_redislock import LockWaiter, held_locks, lock_info
from django_redislock.attempts import CLAIM_MS
from django_redislock.kinds.queued import DEFAULT_PLACE_MS
from tests.support import waiter_workers as workers
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow

CTX = multiprocessing.get_context("spawn")


class Pool:
    """Worker processes started one at a time, each killed at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.ready: Any = CTX.Queue()
        self.processes: dict[str, Any] = {}

    def start(self, role: str, kind: str, name: str, purpose: str, limit: int = 1) -> int:
        target = workers.hold if role == "hold" else workers.wait
        process = CTX.Process(
            target=target, args=(self.url, kind, name, purpose, limit, self.ready), daemon=True
        )
        process.start()
        self.processes[purpose] = process
        said, pid = self.ready.get(timeout=60)
        assert said == purpose
        return int(pid)

    def kill(self, purpose: str) -> None:
        process = self.processes.pop(purpose)
        os.kill(process.pid, signal.SIGKILL)
        process.join(10)

    def close(self) -> None:
        for process in self.processes.values():
            process.kill()
            process.join(10)


@pytest.fixture
def pool(real_backend: Any) -> Iterator[Pool]:
    workers_pool = Pool(real_backend.url)
    yield workers_pool
    workers_pool.close()


def waiters_of(name: str) -> tuple[LockWaiter, ...]:
    info = lock_info(name)
    return () if info is None else info.waiters


def purposes(name: str) -> list[str]:
    return [waiter.purpose for waiter in waiters_of(name)]


def start_waiters(pool: Pool, kind: str, name: str, count: int, limit: int = 1) -> list[str]:
    """``count`` waiters, each in line before the next one starts (so the order is known)."""
    started = []
    for index in range(count):
        purpose = f"waiter-{index}"
        pool.start("wait", kind, name, purpose, limit)
        started.append(purpose)
        assert wait_until(lambda: len(waiters_of(name)) == len(started), 20), purposes(name)
    return started


def test_a_locks_waiters_in_order_with_their_owners(pool: Pool) -> None:
    holder_pid = pool.start("hold", "lock", "invoice:7", "holder")
    pids = {}
    started = start_waiters(pool, "lock", "invoice:7", 3)
    for purpose in started:
        pids[purpose] = pool.processes[purpose].pid
    info = lock_info("invoice:7")
    assert info is not None and info.owner.pid == holder_pid
    assert [w.purpose for w in info.waiters] == started  # longest waiting first
    assert [w.pid for w in info.waiters] == [pids[p] for p in started]
    assert info.waiting == 3
    for waiter in info.waiters:
        assert waiter.kind == "lock"
        assert waiter.host and waiter.thread == "MainThread"
        assert waiter.short_token.endswith("…") and len(waiter.short_token) == 7
        assert waiter.waiting_since.tzinfo is not None
        assert waiter.waiting_since <= dt.datetime.now(dt.timezone.utc)
    since = [w.waiting_since for w in info.waiters]
    assert since == sorted(since)
    [listed] = [i for i in held_locks("invoice:*")]
    assert listed.waiting == 3 and listed.waiters == info.waiters


def test_a_semaphores_waiters(pool: Pool) -> None:
    pool.start("hold", "semaphore", "exports", "holder-a", 2)
    pool.start("hold", "semaphore", "exports", "holder-b", 2)
    started = start_waiters(pool, "semaphore", "exports", 4, limit=2)
    info = lock_info("exports")
    assert info is not None and info.kind == "semaphore"
    assert sorted(h.purpose for h in info.holders) == ["holder-a", "holder-b"]
    assert [w.purpose for w in info.waiters] == started
    assert {w.kind for w in info.waiters} == {"semaphore"}
    assert [w.pid for w in info.waiters] == [pool.processes[p].pid for p in started]


def test_a_writer_behind_readers_and_readers_behind_it(pool: Pool) -> None:
    pool.start("hold", "read", "catalog", "reader-a")
    pool.start("hold", "read", "catalog", "reader-b")
    pool.start("wait", "write", "catalog", "writer")
    assert wait_until(lambda: purposes("catalog") == ["writer"], 20), purposes("catalog")
    pool.start("wait", "read", "catalog", "late-reader")  # behind the waiting writer
    assert wait_until(lambda: len(waiters_of("catalog")) == 2, 20), purposes("catalog")
    info = lock_info("catalog")
    assert info is not None and info.kind == "read"
    assert [(w.purpose, w.kind) for w in info.waiters] == [
        ("writer", "write"),
        ("late-reader", "read"),
    ]


@pytest.mark.parametrize(
    ("kind", "lapse_ms"), [("lock", CLAIM_MS), ("semaphore", DEFAULT_PLACE_MS)]
)
def test_a_killed_waiter_stops_showing_when_its_place_lapses(
    pool: Pool, kind: str, lapse_ms: int
) -> None:
    pool.start("hold", kind, "report", "holder")
    start_waiters(pool, kind, "report", 3)
    pool.kill("waiter-1")  # in the middle of the line
    assert wait_until(lambda: purposes("report") == ["waiter-0", "waiter-2"], lapse_ms / 1000 + 5)
    pool.kill("waiter-0")  # the one with the claim on the next turn
    assert wait_until(lambda: purposes("report") == ["waiter-2"], lapse_ms / 1000 + 5)


def test_a_granted_waiter_leaves_the_list(pool: Pool) -> None:
    pool.start("hold", "lock", "nightly", "holder")
    start_waiters(pool, "lock", "nightly", 2)
    pool.kill("holder")  # its key expires (ttl 30): force it so the line moves now
    from django_redislock import force_release

    assert force_release("nightly")
    _, said = pool.ready.get(timeout=30)
    assert said == "granted"
    info = lock_info("nightly")
    assert wait_until(lambda: purposes("nightly") == ["waiter-1"], 10), (purposes("nightly"), info)
    info = lock_info("nightly")
    assert info is not None and info.purpose == "waiter-0"


def test_no_waiters_when_nobody_waits(lock_backend: Any) -> None:
    from django_redislock import Lock, Semaphore

    with Lock("quiet"), Semaphore("quiet-sem", 2):
        assert lock_info("quiet").waiters == ()  # type: ignore[union-attr]
        assert lock_info("quiet-sem").waiting == 0  # type: ignore[union-attr]


def test_a_waiter_that_gives_up_leaves_at_once(lock_backend: Any) -> None:
    import threading

    from django_redislock import Lock, ReadWriteLock, Semaphore

    for holder, waiter in [
        (Lock("gives-up", ttl=30), Lock("gives-up", ttl=30)),
        (Semaphore("gives-up-s", 1, ttl=30), Semaphore("gives-up-s", 1, ttl=30)),
        (ReadWriteLock("gives-up-rw").write_lock(), ReadWriteLock("gives-up-rw").read_lock()),
    ]:
        assert holder.acquire()
        done = threading.Event()
        thread = threading.Thread(target=lambda w=waiter, d=done: (w.acquire(timeout=0.5), d.set()))
        thread.start()
        assert wait_until(lambda h=holder: len(waiters_of(h.name)) == 1, 10)
        assert done.wait(10)
        thread.join()
        assert waiters_of(holder.name) == ()
        holder.release()


def test_the_docs_example_names_the_longest_waiter(pool: Pool) -> None:
    from tests.support.docs_examples import run_example

    longest_wait = run_example("docs/observability.md", "who-waits")["longest_wait"]
    assert longest_wait("export") is None  # not held
    pool.start("hold", "lock", "export", "holder")
    assert longest_wait("export") is None  # held, nobody waits
    start_waiters(pool, "lock", "export", 2)
    first = lock_info("export").waiters[0]  # type: ignore[union-attr]
    assert longest_wait("export") == f"{first.host}:{first.pid}/MainThread (waiter-0)"


def test_the_inspect_command_shows_the_waiters(real_backend: Any) -> None:
    import json
    import threading
    from io import StringIO

    from django.core.management import call_command

    from django_redislock import Lock

    holder = Lock("shown", ttl=30)
    assert holder.acquire()
    waiter = Lock("shown", ttl=30, purpose="nightly report")
    thread = threading.Thread(target=lambda: waiter.acquire(timeout=30), name="reporter")
    thread.start()
    try:
        assert wait_until(lambda: len(waiters_of("shown")) == 1, 10)
        out = StringIO()
        call_command("redislock", "inspect", "shown", "--json", stdout=out)
        shown = json.loads(out.getvalue())
        assert shown["waiting"] == 1
        [entry] = shown["waiters"]
        assert entry["purpose"] == "nightly report" and entry["kind"] == "lock"
        assert entry["owner"]["thread"] == "reporter" and len(entry["token_prefix"]) == 6
        out = StringIO()
        call_command("redislock", "inspect", "shown", stdout=out)
        text = out.getvalue()
        assert "Waiting:     1" in text and "/reporter (nightly report), lock, since " in text
    finally:
        holder.release()
        thread.join(30)
        waiter.release()
