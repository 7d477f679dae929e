"""8 processes x 50 locked read-modify-writes on one SQLite row, on each real server."""

from __future__ import annotations

import itertools
import multiprocessing

from tests.support.workers import create_resource, increment_worker

PROCESSES = 8
ITERATIONS = 50


def test_mutual_exclusion_across_processes(real_backend, tmp_path):
    db_path = str(tmp_path / "resource.sqlite3")
    create_resource(db_path)
    context = multiprocessing.get_context("spawn")
    with context.Pool(PROCESSES) as pool:
        results = pool.starmap(
            increment_worker,
            [(real_backend.url, db_path, "mp-counter", ITERATIONS)] * PROCESSES,
        )
    sections = sorted(section for history in results for section in history)
    assert len(sections) == PROCESSES * ITERATIONS
    # Every fenced write was accepted and the counter is exact.
    assert all(accepted for *_, accepted in sections)
    import sqlite3

    with sqlite3.connect(db_path) as db:
        counter, fence = db.execute("SELECT counter, fence FROM resource").fetchone()
    assert counter == PROCESSES * ITERATIONS
    # No two critical sections overlap (time.monotonic is system-wide on Linux)...
    for (_, end, _, _), (start, _, _, _) in itertools.pairwise(sections):
        assert end <= start
    # ...and fences strictly increase in acquisition order.
    fences = [f for _, _, f, _ in sections]
    assert fences == sorted(fences) and len(set(fences)) == len(fences)
    assert fence == fences[-1]
