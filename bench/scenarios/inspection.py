"""Scenario 5: ``held_locks`` with many held locks among many unrelated keys; what the
admin's Waiting and Hot locks pages read there, with a full history stream."""

from __future__ import annotations

import datetime as dt
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


#: Locks given waiters, and the history stream's length (REDISLOCK's default MAXLEN).
WAITED = 20
STREAM = 10_000


def _admin_reads(client: redis.Redis, locks: int, ctx: Context) -> tuple[float, float]:
    """Median ms of what the Waiting page reads (``waited_locks``) with ``WAITED`` of the
    held locks waited for, and of what the Hot locks page reads and ranks, with a stream
    of ``STREAM`` events."""
    import django_redislock
    from django_redislock import history
    from django_redislock.events import LockEvent
    from django_redislock.hot import hot_families
    from django_redislock.inspection import waited_locks

    for i in range(WAITED):  # two waiters' records behind each of these holders
        waiter = django_redislock.Lock(f"bench:s5:{i * (locks // WAITED):07d}", connection=ALIAS)
        for n in range(2):
            waiter._do_acquire(f"bench-waiter-{i:03d}-{n}", 1)
    here = "bench:1"
    key = history.stream_key()
    pipe = client.pipeline(transaction=False)
    for i in range(STREAM):
        event = LockEvent("released", "lock", f"bench:s5:{i % 500:07d}", fence=i, held=0.01)
        pipe.xadd(key, {"d": history.pack((time.time(), event, "MainThread"), here)})
    pipe.execute()

    def waiting() -> None:
        found = waited_locks(connection=ALIAS)
        if len(found) != WAITED:
            raise RuntimeError(f"waited_locks found {len(found)} locks, expected {WAITED}")

    def hot() -> None:
        recorded = history.lock_history(connection=ALIAS, since=dt.timedelta(hours=1), limit=50_000)
        if len(recorded) != STREAM:
            raise RuntimeError(f"the history read {len(recorded)} events, expected {STREAM}")
        hot_families(recorded)

    return _timed(waiting, ctx.sizes(3, 5)), _timed(hot, ctx.sizes(3, 5))


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
        waiting, hot = _admin_reads(client, locks, ctx)
        table = Table(["measure", "ms (median)", "target"])
        table.rows.append([f"`held_locks()` first {PAGE}", fmt(first), "< 300"])
        table.rows.append(["`held_locks(one name)` full scan", fmt(search), "< 2,000"])
        table.rows.append(
            [
                f"Waiting page's read: `waited_locks()`, {WAITED} locks waited for",
                fmt(waiting),
                "< 300",
            ]
        )
        table.rows.append(
            [f"Hot locks page's read: a full stream ({STREAM:,} events), ranked", fmt(hot), "< 300"]
        )
        section.tables.append(table)
        section.notes.append(f"Setting up the data took {setup_s:.1f} s (not measured).")
        section.notes.append(
            "The pages' reads are timed, not their HTML (at most 500 rows, rendered by Django)."
        )
    finally:
        client.execute_command("FLUSHALL", "SYNC")
        client.close()
    return section
