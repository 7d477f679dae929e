"""Scenario 2: contended hand-off between processes on one name."""

from __future__ import annotations

import math
import time
from array import array
from dataclasses import dataclass
from typing import Any

import redis

from bench.adapters import SYNC_PEERS
from bench.context import Context
from bench.report import HandoffPoint, Section, Table
from bench.stats import fmt, jain, median, percentile
from bench.workers import WorkerPool, WorkerResult

TTL = 5.0
#: The in-process rows: this many threads of one process on one name.
THREADS = 8
THREAD_HOLD = 0.001


@dataclass
class RunMetrics:
    """Figures of one run (one peer, one process count, one hold time, one round)."""

    acq_per_s: float
    switches: int
    gap_p50_us: float
    gap_p99_us: float
    gap_max_us: float
    jain: float
    longest_wait_ms: float
    client_cpu_us: float  # client CPU per acquisition, all processes
    client_cpu_pct: float  # client CPU over wall time, all processes
    server_cpu_us: float  # server CPU per acquisition
    commands: float  # server commands per acquisition
    overlaps: int


def server_counters(client: redis.Redis) -> tuple[int, float]:
    """(commands processed except INFO, server CPU seconds) from INFO."""
    stats = client.info("commandstats")
    calls = sum(int(value["calls"]) for name, value in stats.items() if name != "cmdstat_info")
    cpu = client.info("cpu")
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def analyse(
    results: list[WorkerResult], duration: float, commands: int, server_cpu: float
) -> RunMetrics:
    """Turn the workers' raw records into :class:`RunMetrics`."""
    intervals: list[tuple[int, int, int]] = []
    for result in results:
        starts, ends = array("q"), array("q")
        starts.frombytes(result.starts)
        ends.frombytes(result.ends)
        intervals.extend((s, e, result.index) for s, e in zip(starts, ends, strict=True))
    intervals.sort()
    gaps: list[float] = []
    overlaps = 0
    latest_end, latest_owner = -1, -1
    for (start, _end, owner), prev in zip(intervals[1:], intervals[:-1], strict=True):
        if prev[1] >= latest_end:
            latest_end, latest_owner = prev[1], prev[2]
        if start < latest_end and owner != latest_owner:
            overlaps += 1
        if owner != prev[2]:
            gaps.append((start - prev[1]) / 1000)
    total = sum(r.acquired for r in results)
    cpu = sum(r.cpu_s for r in results)
    per_acq = total if total else math.nan
    return RunMetrics(
        acq_per_s=total / duration,
        switches=len(gaps),
        gap_p50_us=percentile(gaps, 50),
        gap_p99_us=percentile(gaps, 99),
        gap_max_us=max(gaps) if gaps else math.nan,
        jain=jain([r.acquired for r in results]),
        longest_wait_ms=max(r.longest_wait_ns for r in results) / 1e6,
        client_cpu_us=cpu / per_acq * 1e6,
        client_cpu_pct=cpu / duration * 100,
        server_cpu_us=server_cpu / per_acq * 1e6,
        commands=commands / per_acq,
        overlaps=overlaps,
    )


def _combine(runs: list[RunMetrics]) -> RunMetrics:
    """Median over rounds; worst case for max gap and longest wait; sum of overlaps."""

    def med(attr: str) -> float:
        return median([getattr(r, attr) for r in runs])

    return RunMetrics(
        acq_per_s=med("acq_per_s"),
        switches=int(med("switches")),
        gap_p50_us=med("gap_p50_us"),
        gap_p99_us=med("gap_p99_us"),
        gap_max_us=max(
            (r.gap_max_us for r in runs if not math.isnan(r.gap_max_us)), default=math.nan
        ),
        jain=med("jain"),
        longest_wait_ms=max(r.longest_wait_ms for r in runs),
        client_cpu_us=med("client_cpu_us"),
        client_cpu_pct=med("client_cpu_pct"),
        server_cpu_us=med("server_cpu_us"),
        commands=med("commands"),
        overlaps=sum(r.overlaps for r in runs),
    )


HEADERS = [
    "library",
    "acq/s",
    "switches",
    "gap p50 µs",
    "gap p99 µs",
    "gap max µs",
    "p50 vs raw",
    "Jain",
    "longest wait ms",
    "client CPU µs/acq",
    "client CPU %",
    "server CPU µs/acq",
    "cmds/acq",
    "overlaps",
]


def _row(label: str, m: RunMetrics, raw: RunMetrics | None) -> list[str]:
    ratio = "-"
    if raw is not None and raw.gap_p50_us and not math.isnan(m.gap_p50_us):
        ratio = f"{m.gap_p50_us / raw.gap_p50_us:.2f}x"
    return [
        label,
        fmt(m.acq_per_s),
        str(m.switches),
        fmt(m.gap_p50_us),
        fmt(m.gap_p99_us),
        fmt(m.gap_max_us),
        ratio,
        fmt(m.jain, 3),
        fmt(m.longest_wait_ms),
        fmt(m.client_cpu_us),
        fmt(m.client_cpu_pct, 0),
        fmt(m.server_cpu_us, 1),
        fmt(m.commands, 1),
        str(m.overlaps),
    ]


def _gap_ratio(
    runs: dict[tuple[int, float, str], list[RunMetrics]],
    row: tuple[int, float, str],
    against: tuple[int, float, str],
) -> float | None:
    """Gap p50 of ``row`` over ``against``'s, or None when either was not measured."""
    if not runs.get(row) or not runs.get(against):
        return None
    return _combine(runs[row]).gap_p50_us / _combine(runs[against]).gap_p50_us


def _threads_table(
    runs: dict[tuple[int, float, str], list[RunMetrics]],
    peers: list[Any],
    duration: float,
    rounds: int,
) -> Table:
    """The in-process rows: ``THREADS`` threads of one process, each its own lock object."""
    table = Table(
        list(HEADERS),
        caption=f"{THREADS} threads of one process, hold {THREAD_HOLD * 1000:g} ms, "
        f"{duration:g} s window x {rounds} round(s) (client CPU: the process's, per acquisition)",
    )
    raw_runs = runs.get((-THREADS, THREAD_HOLD, "raw"))
    raw = _combine(raw_runs) if raw_runs else None
    for peer in peers:
        peer_runs = runs.get((-THREADS, THREAD_HOLD, peer.key))
        if peer_runs:
            table.rows.append(_row(peer.label, _combine(peer_runs), raw))
    return table


def run(ctx: Context) -> Section:
    """Every available peer x process counts x hold times, interleaved in rounds."""
    section = Section(
        "2. Contended hand-off",
        intro=(
            "N spawned processes loop `acquire(timeout=rest of window)` → hold → `release()` "
            "on one name. *gap* = next process's acquire-complete minus the previous holder's "
            "release-invoke (system-wide `time.monotonic_ns()`), counted only where the holder "
            "changed. *longest wait* includes a final wait cut off by the window's end. CPU "
            "from `getrusage` in each worker; server CPU and commands from `INFO` deltas "
            "(INFO itself excluded). Median over rounds; gap max and longest wait are the "
            "worst round; overlaps are summed and must be 0. The last table runs "
            f"{THREADS} threads of one process instead (each thread its own lock object)."
        ),
    )
    procs_list = ctx.sizes([4], [2, 4, 8])
    holds = ctx.sizes([0.001], [0.0, 0.001])
    rounds = ctx.sizes(1, 2)
    duration = ctx.sizes(1.0, 2.0)
    peers = []
    for peer in SYNC_PEERS.values():
        if peer.key == "ours-signals" or not peer.exclusive:
            continue  # scenario 1 rows: connected signal receivers; readers; re-entries
        reason = peer.skip()
        if reason:
            section.notes.append(f"{peer.label}: skipped, {reason}")
        else:
            peers.append(peer)
    admin = ctx.admin()
    runs: dict[tuple[int, float, str], list[RunMetrics]] = {}
    failed: dict[str, str] = {}
    pool = WorkerPool(max(procs_list), ctx.target)
    try:
        for round_no in range(rounds):
            for procs in procs_list:
                for hold in holds:
                    for peer in peers:
                        if peer.key in failed:
                            continue
                        name = f"bench:s2:{peer.key}:{procs}:{hold}:{round_no}"
                        try:
                            pool.prepare(procs, peer.key, name, TTL)
                            calls0, cpu0 = server_counters(admin)
                            results = pool.run(procs, duration, hold)
                            calls1, cpu1 = server_counters(admin)
                        except Exception as exc:
                            failed[peer.key] = f"{type(exc).__name__}: {exc}"[:300]
                            continue
                        metrics = analyse(results, duration, calls1 - calls0, cpu1 - cpu0)
                        runs.setdefault((procs, hold, peer.key), []).append(metrics)
                        time.sleep(0.05)
            for peer in peers:
                if peer.key in failed:
                    continue
                name = f"bench:s2:{peer.key}:threads:{round_no}"
                try:
                    calls0, cpu0 = server_counters(admin)
                    results = pool.run_threads(peer.key, name, TTL, THREADS, duration, THREAD_HOLD)
                    calls1, cpu1 = server_counters(admin)
                except Exception as exc:
                    failed[peer.key] = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                metrics = analyse(results, duration, calls1 - calls0, cpu1 - cpu0)
                runs.setdefault((-THREADS, THREAD_HOLD, peer.key), []).append(metrics)
                time.sleep(0.05)
    finally:
        pool.close()
        admin.close()
    for procs in procs_list:
        for hold in holds:
            table = Table(
                list(HEADERS),
                caption=f"{procs} processes, hold {hold * 1000:g} ms, "
                f"{duration:g} s window x {rounds} round(s)",
            )
            raw_runs = runs.get((procs, hold, "raw"))
            raw = _combine(raw_runs) if raw_runs else None
            for peer in peers:
                peer_runs = runs.get((procs, hold, peer.key))
                if not peer_runs:
                    continue
                metrics = _combine(peer_runs)
                table.rows.append(_row(peer.label, metrics, raw))
                if procs == 4 and hold == 0.001:
                    section.chart.append(
                        HandoffPoint(
                            peer.label,
                            metrics.gap_p50_us,
                            metrics.gap_p99_us,
                            metrics.longest_wait_ms,
                        )
                    )
            section.tables.append(table)
    section.tables.append(_threads_table(runs, peers, duration, rounds))
    section.chart_caption = "4 processes, 1 ms hold: hand-off gap and longest wait"
    compare = max(procs_list)
    threads = _gap_ratio(runs, (-THREADS, THREAD_HOLD, "ours"), (compare, THREAD_HOLD, "ours"))
    if threads is not None:
        section.notes.append(
            f"Lock hand-off between {THREADS} threads of one process: gap p50 "
            f"{threads:.2f}x the gap between {compare} processes"
        )
    for procs in procs_list:
        semaphore = _gap_ratio(runs, (procs, 0.001, "ours-semaphore"), (procs, 0.001, "ours"))
        if semaphore is not None:
            section.notes.append(
                f"{procs} processes, 1 ms hold: Semaphore (limit 1) hand-off gap p50 "
                f"{semaphore:.2f}x Lock's"
            )
    for key, reason in failed.items():
        section.notes.append(f"{SYNC_PEERS[key].label}: failed, {reason}")
    return section
