"""Scenario 4: many held watchdog locks in one process.

How much CPU the process spends per second keeping them alive, how many
renewals each Redis round trip carries (the watchdog pipelines the locks that
fall due together), and that none is lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis

from bench.adapters import ours_skip_reason, setup_django
from bench.context import Context
from bench.report import Section, Table
from bench.stats import fmt

TTL = 3.0  # renewed about every second


def _count_batches(transport_class: Any) -> tuple[list[int], Any]:
    """Wrap the transport's ``call_many`` (what the watchdog renews a batch through) to
    record each batch's size; return (sizes, restore)."""
    sizes: list[int] = []
    original = transport_class.__dict__["call_many"]

    def counting(self: Any, ops: list[Any]) -> list[Any]:
        sizes.append(len(ops))
        return original(self, ops)

    transport_class.call_many = counting

    def restore() -> None:
        transport_class.call_many = original

    return sizes, restore


def run(ctx: Context) -> Section:
    """Hold N watchdog locks for a window; measure renewal CPU and batching."""
    section = Section("4. Watchdog scale")
    reason = ours_skip_reason()
    if reason:
        section.skipped = reason
        return section
    count = ctx.sizes(1_000, 10_000)
    window = ctx.sizes(3.0, 6.0)
    setup_django(ctx.target.django_settings)
    import django_redislock
    from django_redislock import watchdog

    section.intro = (
        f"{count:,} locks with `watchdog=True`, ttl {TTL:g} s (renewed every ~{TTL / 3:g} s), "
        f"held by one process for {window:g} s while its main thread sleeps. CPU is the "
        "process's user+system time over the window (all of it the watchdog's work); "
        "renewals and round trips are counted around the transport's `call_many`."
    )
    admin = redis.Redis.from_url(ctx.target.url)
    admin.execute_command("FLUSHALL", "SYNC")
    locks = [
        django_redislock.Lock(f"bench:s4:{i:05d}", ttl=TTL, watchdog=True) for i in range(count)
    ]
    for lock in locks:
        lock.acquire(blocking=False)
    from django_redislock.transports.single import SingleNode

    sizes, restore = _count_batches(SingleNode)
    try:
        admin.config_resetstat()
        cpu0, wall0 = time.process_time(), time.monotonic()
        threading.Event().wait(window)
        cpu = time.process_time() - cpu0
        wall = time.monotonic() - wall0
        server_usec = int(admin.info("commandstats").get("cmdstat_evalsha", {}).get("usec", 0))
    finally:
        restore()
    lost = sum(1 for lock in locks if lock.lost)
    for lock in locks:
        if not lock.lost:
            lock.release()
    renewals = sum(sizes)
    table = Table(
        [
            "held locks",
            "renewals / s",
            "client CPU % of one core",
            "client CPU µs / renewal",
            "server CPU µs / renewal",
            "renewals / round trip (mean)",
            "largest batch",
            "lost",
        ]
    )
    table.rows.append(
        [
            f"{count:,}",
            fmt(renewals / wall),
            fmt(100 * cpu / wall),
            fmt(1e6 * cpu / renewals) if renewals else "-",
            fmt(server_usec / renewals) if renewals else "-",
            fmt(renewals / len(sizes)) if sizes else "-",
            str(max(sizes, default=0)),
            str(lost),
        ]
    )
    section.tables.append(table)
    section.notes.append(f"watchdog thread alive during the window: {watchdog.running()}")
    return section
