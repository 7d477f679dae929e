"""Scenario 3: Redlock over 5 nodes, all fast, one slow and all slow."""

from __future__ import annotations

import asyncio
import dataclasses
import time

from bench.adapters import (
    SYNC_PEERS,
    AsyncPeer,
    Peer,
    Target,
    redlock_async_peers,
    redlock_peers,
    time_async_cycles,
)
from bench.context import Context
from bench.report import Section, Table
from bench.stats import fmt, median

TTL = 10.0
SLOW = 0.002  # seconds each way


def _cycle_us(peer: Peer | AsyncPeer, target: Target, name: str, cycles: int) -> float:
    if isinstance(peer, AsyncPeer):
        return float(asyncio.run(_acycle_us(peer, target, name, cycles)))
    lock = peer.build(target, name, TTL)
    for _ in range(3):
        lock.acquire(blocking=False)
        lock.release()
    start = time.perf_counter_ns()
    for _ in range(cycles):
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"{peer.key}: uncontended acquire failed")
        lock.release()
    return (time.perf_counter_ns() - start) / cycles / 1000


async def _acycle_us(peer: AsyncPeer, target: Target, name: str, cycles: int) -> float:
    return await time_async_cycles(peer.build(target, name, TTL), peer.key, cycles, warmup=3)


def run(ctx: Context) -> Section:
    """Cycle latency of each 5-node Redlock beside single-node raw, per network condition."""
    section = Section(
        "3. Redlock, 5 nodes",
        intro=(
            "Uncontended acquire + release over 5 independent servers, beside the single-node "
            "raw baseline in the same rounds. *slow* = the fault proxy delays every chunk "
            f"{SLOW * 1000:g} ms each way ({2 * SLOW * 1000:g} ms per round trip). Median of "
            "rounds, µs per cycle."
        ),
    )
    conditions: list[tuple[str, Target, list[float] | None]] = [
        ("all fast (direct)", ctx.target, None),
    ]
    if ctx.proxies is None:
        section.notes.append(f"slow-node conditions skipped: {ctx.proxy_skip}")
    else:
        proxied = dataclasses.replace(
            ctx.target, redlock_urls=tuple(ctx.proxies.urls), redlock_alias_prefix="pnode"
        )
        conditions += [
            ("all fast (via proxy)", proxied, [0.0] * 5),
            ("one slow", proxied, [SLOW] + [0.0] * 4),
            ("all slow", proxied, [SLOW] * 5),
        ]
    peers: list[Peer | AsyncPeer] = [SYNC_PEERS["raw"]]
    for peer in [*redlock_peers().values(), *redlock_async_peers().values()]:
        reason = peer.skip()
        if reason:
            section.notes.append(f"{peer.label}: skipped, {reason}")
        else:
            peers.append(peer)
    rounds = ctx.sizes(2, 3)
    values: dict[tuple[str, str], list[float]] = {}
    failed: dict[str, str] = {}
    for round_no in range(rounds):
        for cond, target, delays in conditions:
            if delays is not None and ctx.proxies is not None:
                ctx.proxies.delay(delays)
            cycles = ctx.sizes(20, 100) if delays and any(delays) else ctx.sizes(100, 400)
            for peer in peers:
                if peer.key in failed:
                    continue
                try:
                    value = _cycle_us(peer, target, f"bench:s3:{peer.key}:{round_no}", cycles)
                except Exception as exc:
                    failed[peer.key] = f"{type(exc).__name__}: {exc}"[:300]
                    continue
                values.setdefault((cond, peer.key), []).append(value)
    if ctx.proxies is not None:
        ctx.proxies.delay([0.0] * 5)
    table = Table(["library"] + [c for c, _, _ in conditions] + ["fast vs 1-node raw"])
    for peer in peers:
        row = [peer.label]
        for cond, _, _ in conditions:
            row.append(fmt(median(values.get((cond, peer.key), []))))
        fast = median(values.get((conditions[0][0], peer.key), []))
        base = median(values.get((conditions[0][0], "raw"), []))
        row.append(f"{fast / base:.2f}x" if base and fast == fast else "-")
        table.rows.append(row)
    section.tables.append(table)
    section.notes.extend(_ratios(values, [c for c, _, _ in conditions], peers))
    section.notes.append(
        "The raw row is one node, never behind the proxy: its figure is the same reference "
        "in every column (measured each time, so it also shows drift)."
    )
    for key, reason in failed.items():
        section.notes.append(f"{key}: failed, {reason}")
    return section


def _ratios(
    values: dict[tuple[str, str], list[float]],
    conditions: list[str],
    peers: list[Peer | AsyncPeer],
) -> list[str]:
    """The issue-36 targets, per Redlock peer: against the sequential reference in every
    round (all fast, direct), one slow node against all fast and all slow against one slow
    round trip (raw on node 0 alone, slow)."""
    notes = []
    fast, via, one, every = conditions[0], "all fast (via proxy)", "one slow", "all slow"
    for peer in peers:
        if not peer.key.startswith(("ours-redlock", "pottery-5")):
            continue
        ours, seq = values.get((fast, peer.key), []), values.get((fast, "sequential-5"), [])
        parts = []
        if ours and len(ours) == len(seq):
            per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(ours, seq, strict=True))
            parts.append(f"vs sequential per round {per_round}")
        raw = median(values.get((fast, "raw"), []))
        if ours and raw > 0:
            parts.append(f"vs one raw cycle {median(ours) / raw:.2f}x")
        pairs = [
            ("one slow vs all fast", one, via, peer.key),
            ("all slow vs raw node 0 slow", every, every, "raw-node0"),
            ("all fast vs the majority floor", fast, fast, "floor-5"),
            ("all slow vs the majority floor", every, every, "floor-5"),
        ]
        for label, cond, base_cond, base_key in pairs:
            a, b = (
                median(values.get((cond, peer.key), [])),
                median(values.get((base_cond, base_key), [])),
            )
            if cond in conditions and a > 0 and b > 0:  # NaN when missing
                parts.append(f"{label} {a / b:.2f}x")
        notes.append(f"{peer.label}: " + "; ".join(parts))
    floor_fast = median(values.get((fast, "floor-5"), []))
    floor_slow = median(values.get((every, "floor-5"), []))
    raw, raw_slow = (
        median(values.get((fast, "raw"), [])),
        median(values.get((every, "raw-node0"), [])),
    )
    if floor_fast > 0 and raw > 0:
        bound = (
            "what bounds any 5-node client here: the majority floor is "
            f"{floor_fast / raw:.2f}x one raw cycle"
        )
        if floor_slow > 0 and raw_slow > 0:
            bound += f", and all slow {floor_slow / raw_slow:.2f}x raw node 0 slow"
        notes.append(bound)
    return notes
