"""Scenario 5: ``held_locks`` with many held locks among many unrelated keys."""

from __future__ import annotations

import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.adapters import ours_feature, ours_skip_reason
from bench.context import Context
from bench.report import Section, Table
from bench.stats import fmt

ALIAS = "inspect"  # Django cache alias of the scenario's own server
TTL = 900.0
PAGE = 100


def _populate_junk(client: redis.Redis, count: int) -> None:
    """``count`` unrelated string keys, pipelined MSET batches."""
    batch = 1000
    pipe = client.pipeline(transaction=False)
    for start in range(0, count, batch):
        pipe.mset({f"junk:{i:07d}": b"x" * 16 for i in range(start, min(count, start + batch))})
        if (start // batch) % 50 == 49:
            pipe.execute()
    pipe.execute()


def _timed(func: Callable[[], Any], repeat: int) -> float:
    """Median milliseconds of ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run(ctx: Context) -> Section:
    """First page and a one-match pattern search over the scenario's own server."""
    section = Section("5. Inspection")
    reason = ours_skip_reason() or ours_feature("held_locks")
    if reason is None and ctx.inspect_url is None:
        reason = "no inspection server was started"
    if reason:
        section.skipped = reason
        return section
    import django_redislock

    locks = ctx.sizes(10_000, 100_000)
    junk = ctx.sizes(100_000, 1_000_000)
    section.intro = (
        f"{locks:,} locks held through `Lock(...).acquire()` in a database that also holds "
        f"{junk:,} unrelated keys (a server of its own). *first page* = the first {PAGE} "
        "`held_locks()` entries; *one-match search* = `list(held_locks(<one name>))`, a full "
        "SCAN. Median of repeats, ms."
    )
    assert ctx.inspect_url is not None
    client = redis.Redis.from_url(ctx.inspect_url)
    try:
        client.execute_command("FLUSHALL", "SYNC")
        t0 = time.monotonic()
        _populate_junk(client, junk)
        for i in range(locks):
            lock = django_redislock.Lock(f"bench:s5:{i:07d}", ttl=TTL, connection=ALIAS)
            if not lock.acquire(blocking=False):
                raise RuntimeError("could not take a fresh lock")
        setup_s = time.monotonic() - t0
        held = django_redislock.held_locks

        def first_page() -> None:
            list(itertools.islice(held(connection=ALIAS), PAGE))

        target_name = f"bench:s5:{locks // 2:07d}"

        def one_match() -> None:
            found = list(held(target_name, connection=ALIAS))
            if len(found) != 1:
                raise RuntimeError(f"pattern search found {len(found)} locks, expected 1")

        first = _timed(first_page, ctx.sizes(3, 5))
        search = _timed(one_match, ctx.sizes(1, 3))
        table = Table(["measure", "ms (median)", "target"])
        table.rows.append([f"`held_locks()` first {PAGE}", fmt(first), "< 300"])
        table.rows.append(["`held_locks(one name)` full scan", fmt(search), "< 2,000"])
        section.tables.append(table)
        section.notes.append(f"Setting up the data took {setup_s:.1f} s (not measured).")
        section.notes.append("The admin change-list page is not measured here yet.")
    finally:
        client.execute_command("FLUSHALL", "SYNC")
        client.close()
    return section
