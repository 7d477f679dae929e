"""The semaphore across processes, on each real server: the limit holds under contention
(and the checker is shown to catch a broken limit), a killed holder frees only its own
permit after its TTL, waiters are served longest first, and a waiter killed while in line
holds the others back at most ``PLACE_BOUND`` (docs/kinds.md)."""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import time
from typing import Any

import pytest

from django_redislock import Semaphore, lock_info
from django_redislock.attempts import CLAIM_MS, MAX_SUBSCRIBED_WAIT
from tests.support import semaphore_workers as workers
from tests.support.polling import wait_until

pytestmark = pytest.mark.slow

PROCESSES = 8
ITERATIONS = 40
LIMIT = 3
#: How long a waiter killed while in line can hold the others back: its place in line
#: lapses CLAIM_MS after its last renewal (docs/kinds.md says so).
PLACE_BOUND = CLAIM_MS / 1000

CTX = multiprocessing.get_context("spawn")


def most_inside(sections: list[tuple[float, float, int]]) -> int:
    """The most sections open at one moment (an exit before an entry at the same time)."""
    events = sorted(
        [(start, 1) for start, _, _ in sections] + [(end, -1) for _, end, _ in sections]
    )
    inside = most = 0
    for _, step in events:
        inside += step
        most = max(most, inside)
    return most


def run_holders(url: str, name: str, limit: int, iterations: int, hold: float) -> list[Any]:
    with CTX.Manager() as manager, CTX.Pool(PROCESSES) as pool:
        start = manager.Barrier(PROCESSES)  # every worker set up before the first acquire
        pending = pool.starmap_async(
            workers.hold_many, [(url, name, limit, iterations, hold, start)] * PROCESSES
        )
        results = pending.get(timeout=110)
    return [section for sections in results for section in sections]


def test_never_more_than_the_limit_inside(real_backend: Any, record_property: Any) -> None:
    sections = run_holders(real_backend.url, "pdf-exports", LIMIT, ITERATIONS, 0.002)
    assert len(sections) == PROCESSES * ITERATIONS
    assert most_inside(sections) == LIMIT  # reached, never passed
    fences = sorted(fence for *_, fence in sections)
    assert fences == list(range(1, PROCESSES * ITERATIONS + 1))  # one per permit granted
    span = max(end for _, end, _ in sections) - min(start for start, _, _ in sections)
    utilisation = sum(end - start for start, end, _ in sections) / (LIMIT * span)
    record_property("utilisation", round(utilisation, 3))
    print(f"\n{real_backend.name}: permits in use {utilisation:.0%} of the time (limit {LIMIT})")
    assert lock_info("pdf-exports") is None


def test_no_waiter_misses_its_turn(real_backend: Any) -> None:
    # Released at once and taken again: a waiter that was not woken when its turn came
    # waits for its fallback retry (MAX_SUBSCRIBED_WAIT, 2 s). A waiter joining the line
    # ahead of others (its place dates from its first try) and refused for them slept so.
    with CTX.Manager() as manager, CTX.Pool(4) as pool:
        start = manager.Barrier(4)
        waits = pool.starmap(workers.longest_wait, [(real_backend.url, "turns", 40, start)] * 4)
    assert max(waits) < MAX_SUBSCRIBED_WAIT / 2, waits


def test_the_checker_catches_a_broken_limit(make_server: Any, settings: Any) -> None:
    # With the limit check switched off (every worker asks for far more permits than the
    # checker allows), the same checker sees more than LIMIT inside at once.
    server = make_server()
    sections = run_holders(server.url, "pdf-exports", 1000, 5, 0.05)
    assert most_inside(sections) > LIMIT


def _killed_holder(url: str, name: str, limit: int, ttl: float) -> tuple[Any, str]:
    ready = CTX.Queue()
    process = CTX.Process(target=workers.hold_until_killed, args=(url, name, limit, ttl, ready))
    process.start()
    token = ready.get(timeout=60)
    os.kill(process.pid, signal.SIGKILL)
    process.join(10)
    return process, token


def test_a_killed_holder_frees_only_its_permit_after_its_ttl(real_backend: Any) -> None:
    mine = Semaphore("pdf-exports", 2, ttl=60)
    assert mine.acquire(blocking=False)
    _, token = _killed_holder(real_backend.url, "pdf-exports", 2, 1.0)
    tokens = {h.token for h in mine.holders()}
    assert tokens == {mine.token, token}  # its permit is still held right after the kill
    assert not Semaphore("pdf-exports", 2).acquire(blocking=False)
    late = Semaphore("pdf-exports", 2, ttl=10)
    assert late.acquire(timeout=10)  # once its TTL ran out
    assert {h.token for h in mine.holders()} == {mine.token, late.token}
    assert mine.owned() and mine.remaining() > 50  # ours untouched
    late.release()
    mine.release()


def _start_waiters(url: str, name: str, count: int, results: Any) -> list[Any]:
    """Start ``count`` waiters one after the other, each once the previous is in line."""
    client = Semaphore(name, 1)._client()
    line = f"redislock:{{{name}}}:queue"
    processes = []
    for index in range(count):
        process = CTX.Process(target=workers.wait_for_permit, args=(url, name, index, results))
        process.start()
        processes.append(process)
        assert wait_until(lambda n=index + 1: client.zcard(line) == n, timeout=60)
    return processes


def test_the_longest_waiter_gets_the_next_permit(real_backend: Any) -> None:
    holder = Semaphore("one-at-a-time", 1, ttl=60)
    assert holder.acquire(blocking=False)
    results = CTX.Queue()
    processes = _start_waiters(real_backend.url, "one-at-a-time", 6, results)
    holder.release()
    granted = sorted((results.get(timeout=60) for _ in processes), key=lambda r: r[1])
    for process in processes:
        process.join(30)
    # Fences grow with every grant: in grant order the waiters came in arrival order.
    assert [index for index, *_ in granted] == list(range(6))
    assert lock_info("one-at-a-time") is None


def test_a_waiter_killed_in_line_holds_the_others_back_briefly(real_backend: Any) -> None:
    holder = Semaphore("one-at-a-time", 1, ttl=60)
    assert holder.acquire(blocking=False)
    results = CTX.Queue()
    first, second = _start_waiters(real_backend.url, "one-at-a-time", 2, results)
    os.kill(first.pid, signal.SIGKILL)
    first.join(10)
    released = time.monotonic()
    holder.release()
    index, _, granted_at, _ = results.get(timeout=PLACE_BOUND + 10)
    second.join(30)
    assert index == 1
    # The dead waiter's place lapsed within its bound; then the next in line got in.
    assert granted_at - released <= PLACE_BOUND + 0.5
    with pytest.raises(queue.Empty):
        results.get(timeout=0.1)
