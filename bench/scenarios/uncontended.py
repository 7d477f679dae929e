"""Scenario 1: uncontended acquire+release cycle, one client, sync and async."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bench.adapters import (
    ASYNC_PEERS,
    SYNC_PEERS,
    AsyncPeer,
    Peer,
    Target,
    observing,
    time_async_cycles,
)
from bench.context import Context
from bench.report import Section, Table
from bench.stats import fmt, median
from bench.warm import warm_cpus

TTL = 10.0


@dataclass
class ModeResult:
    """µs per cycle for each peer key, one value per round."""

    mode: str
    rounds: dict[str, list[float]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def _time_sync(peer: Peer, target: Target, cycles: int, warmup: int) -> float:
    lock = peer.build(target, f"bench:s1:{peer.key}", TTL)
    with observing(lock):
        for _ in range(warmup):
            lock.acquire(blocking=False)
            lock.release()
        start = time.perf_counter_ns()
        for _ in range(cycles):
            if not lock.acquire(blocking=False):
                raise RuntimeError(f"{peer.key}: uncontended acquire failed")
            lock.release()
        return (time.perf_counter_ns() - start) / cycles / 1000


async def _time_async(peer: AsyncPeer, target: Target, cycles: int, warmup: int) -> float:
    lock = peer.build(target, f"bench:s1:{peer.key}", TTL)
    try:
        return await time_async_cycles(lock, peer.key, cycles, warmup)
    finally:
        close = getattr(lock, "aclose", None)
        if close is not None:
            await close()


def measure(ctx: Context, mode: str) -> ModeResult:
    """Interleave every available peer in rounds and collect µs per cycle."""
    result = ModeResult(mode)
    sync_peers = []
    for peer in SYNC_PEERS.values():
        reason = peer.skip()
        result.labels[peer.key] = peer.label
        if reason:
            result.skipped[peer.key] = reason
        else:
            sync_peers.append(peer)
    async_peers = []
    for apeer in ASYNC_PEERS.values():
        reason = apeer.skip()
        result.labels[apeer.key] = apeer.label
        if reason:
            result.skipped[apeer.key] = reason
        else:
            async_peers.append(apeer)
    cycles = ctx.sizes(300, 2000)
    rounds = ctx.sizes(3, 5)
    for _ in range(rounds):
        for peer in sync_peers:
            try:
                value = _time_sync(peer, ctx.target, cycles, warmup=20)
            except Exception as exc:  # one broken peer must not sink the run
                result.skipped[peer.key] = f"failed: {type(exc).__name__}: {exc}"
                continue
            result.rounds.setdefault(peer.key, []).append(value)
        for apeer in async_peers:
            try:
                value = asyncio.run(_time_async(apeer, ctx.target, cycles, warmup=20))
            except Exception as exc:
                result.skipped[apeer.key] = f"failed: {type(exc).__name__}: {exc}"
                continue
            result.rounds.setdefault(apeer.key, []).append(value)
    return result


def _table(result: ModeResult) -> Table:
    table = Table(
        ["library", "µs / cycle (median)", "min round", "max round", "ratio to raw"],
        caption=f"CPUs {result.mode}",
    )
    for key, label in result.labels.items():
        base_key = "raw-async" if key.endswith("-async") else "raw"
        if key in result.skipped and key not in result.rounds:
            table.rows.append([label, "skipped", "", "", result.skipped[key]])
            continue
        values = result.rounds.get(key, [])
        base = median(result.rounds.get(base_key, []))
        value = median(values)
        table.rows.append(
            [
                label,
                fmt(value),
                fmt(min(values)),
                fmt(max(values)),
                f"{value / base:.2f}x" if base else "-",
            ]
        )
    return table


def _kind_ratio(result: ModeResult, key: str, base_key: str) -> str:
    """``key``'s median cycle over ``base_key``'s in the same rounds, or "" if either is missing."""
    value, base = median(result.rounds.get(key, [])), median(result.rounds.get(base_key, []))
    return f"{value / base:.2f}x" if value and base and value == value and base == base else ""


def run(ctx: Context) -> Section:
    """Scenario 1 in the current CPU mode, or idle then warm with ``--both-modes``."""
    section = Section(
        "1. Uncontended acquire + release",
        intro=(
            "One client, one name, `acquire(blocking=False)` then `release()` in a loop on one "
            "lock object per library. Libraries run interleaved in rounds; the table gives the "
            "median round. Async rows are measured against the async raw baseline."
        ),
    )
    modes: list[tuple[str, bool]]
    if ctx.both_modes:
        modes = [("idle", False), ("warm (nice-19 busy loop per core)", True)]
    elif ctx.warm_cpu:
        modes = [("warm (nice-19 busy loop per core)", False)]  # already warm for the run
    else:
        modes = [("idle", False)]
    for mode, warm in modes:
        with warm_cpus(warm):
            result = measure(ctx, mode)
        section.tables.append(_table(result))
        kinds = [
            (f"Semaphore (limit 1) {_kind_ratio(result, 'ours-semaphore', 'ours')}"),
            (f"ReadWriteLock read {_kind_ratio(result, 'ours-read', 'ours')}"),
            (f"ReadWriteLock write {_kind_ratio(result, 'ours-write', 'ours')}"),
        ]
        multi = _kind_ratio(result, "ours-multilock", "ours")
        if multi:
            section.notes.append(
                f"{mode}: a MultiLock over 2 names {multi} a Lock's cycle (a Lock per name)"
            )
        if _kind_ratio(result, "ours-read", "ours"):
            section.notes.append(
                f"{mode}: against Lock's cycle: {', '.join(kinds)} (target <= 1.5x each)"
            )
        reentry = _kind_ratio(result, "ours-reentry", "raw")
        if reentry:
            section.notes.append(
                f"{mode}: a re-entry of a held reentrant Lock (acquire + release, no round "
                f"trip): {reentry} of raw's cycle"
            )
    section.notes.append("Skipped or failed peers show the reason in the ratio column.")
    return section
