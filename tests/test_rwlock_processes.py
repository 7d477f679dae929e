"""The read-write lock across processes, on each real server: 6 readers in a continuous
stream and 2 writers. A writer is never inside with anyone, readers overlap, fences grow in
grant order, and every writer gets in within a bounded wait; with writer preference
switched off, the same checker sees writers starved."""

from __future__ import annotations

import multiprocessing
from typing import Any

import pytest

from django_redislock import lock_info
from django_redislock.attempts import MAX_SUBSCRIBED_WAIT
from tests.support import rwlock_workers as workers
from tests.test_semaphore_processes import most_inside

pytestmark = pytest.mark.slow

READERS = 6
WRITERS = 2
#: A reader's hold: the stream never runs dry (each reader is out ~1 ms in 50).
READ_HOLD = 0.05
#: The longest a writer may wait: the readers inside leave within READ_HOLD; far less
#: than a reader stream that never ends (RUN_FOR).
WRITER_BOUND = MAX_SUBSCRIBED_WAIT
RUN_FOR = 3 * WRITER_BOUND

CTX = multiprocessing.get_context("spawn")


def run(url: str, writes: int, prefer_writers: bool = True) -> tuple[list[Any], list[Any]]:
    """(reader sections, writer sections) of 6 reading and 2 writing processes."""
    with CTX.Manager() as manager, CTX.Pool(READERS + WRITERS) as pool:
        start, stop = manager.Barrier(READERS + WRITERS), manager.Event()
        reading = pool.starmap_async(
            workers.read_stream,
            [(url, "prices", READ_HOLD, RUN_FOR, stop, start, prefer_writers)] * READERS,
        )
        writing = pool.starmap_async(
            workers.write_some, [(url, "prices", writes, 0.005, 0.05, start)] * WRITERS
        )
        written = writing.get(timeout=100)
        stop.set()
        read = reading.get(timeout=100)
    return [s for r in read for s in r], [s for w in written for s in w]


def writer_waits(writes: list[Any]) -> list[float]:
    return [entered - asked for entered, _, _, asked in writes]


def test_writers_alone_readers_together_and_no_writer_starved(real_backend: Any) -> None:
    reads, writes = run(real_backend.url, writes=5)
    assert len(writes) == WRITERS * 5 and len(reads) > READERS
    for entered, left, fence, _ in writes:
        # A writer is never inside with anyone: no other hold overlaps it.
        others = [s for s in reads + writes if s[2] != fence]
        assert all(end <= entered or start >= left for start, end, *_ in others)
        # Fences grow in grant order across readers and writers.
        assert all(f > fence for start, _, f, _ in others if start >= left)
        assert all(f < fence for _, end, f, _ in others if end <= entered)
    assert most_inside([s[:3] for s in reads]) >= 2  # readers overlap each other
    assert len({s[2] for s in reads + writes}) == len(reads) + len(writes)
    waits = writer_waits(writes)
    print(f"\n{real_backend.name}: writer waits max {max(waits):.3f}s behind {len(reads)} reads")
    assert max(waits) < WRITER_BOUND, waits
    assert lock_info("prices") is None


def test_the_checker_catches_starved_writers(make_server: Any) -> None:
    # Readers that do not see waiting writers keep the lock read while they stream: the
    # same bound fails (writers get in only when the stream ends, after RUN_FOR).
    server = make_server()
    _, writes = run(server.url, writes=1, prefer_writers=False)
    assert max(writer_waits(writes)) > WRITER_BOUND
