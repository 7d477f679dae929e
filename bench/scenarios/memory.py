"""Scenario 6: Redis memory per held lock, and what is left per name after release."""

from __future__ import annotations

import time

import redis

from bench.adapters import OBSERVED_PEERS, SYNC_PEERS, Peer, SyncLock
from bench.context import Context
from bench.report import Section, Table
from bench.stats import fmt

TTL = 600.0


def _used(client: redis.Redis) -> int:
    time.sleep(0.05)
    return int(client.info("memory")["used_memory"])


def _flush(client: redis.Redis) -> None:
    """FLUSHALL SYNC: Valkey 8 flushes lazily by default, which would skew the baseline."""
    client.execute_command("FLUSHALL", "SYNC")


def _bare_keys(client: redis.Redis, count: int) -> tuple[float, float]:
    """Bytes per bare ``SET NX PX`` key (16-byte token) held and left after DEL."""
    _flush(client)
    before = _used(client)
    names = [f"bench:s6:{i:06d}" for i in range(count)]
    for name in names:
        client.set(name, b"t" * 16, nx=True, px=int(TTL * 1000))
    held = _used(client)
    for name in names:
        client.delete(name)
    after = _used(client)
    return (held - before) / count, (after - before) / count


def _peer(ctx: Context, client: redis.Redis, peer: Peer, count: int) -> tuple[float, float]:
    _flush(client)
    locks: list[SyncLock] = [peer.build(ctx.target, f"bench:s6:{i:06d}", TTL) for i in range(count)]
    locks[0].acquire(blocking=False)  # load scripts, open the pool: not part of the delta
    locks[0].release()
    _flush(client)
    before = _used(client)
    for lock in locks:
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"{peer.key}: could not acquire a fresh name")
    held = _used(client)
    for lock in locks:
        lock.release()
    after = _used(client)
    return (held - before) / count, (after - before) / count


def run(ctx: Context) -> Section:
    """``INFO memory`` deltas over N held locks, for a bare key and each peer."""
    count = ctx.sizes(1000, 10_000)
    section = Section(
        "6. Memory per held lock",
        intro=(
            f"`INFO memory` `used_memory` delta over {count:,} locks on distinct names "
            "(FLUSHALL before each library), divided by the count; then every lock is released "
            "and the delta left per name is shown. Key names differ in length between "
            "libraries (prefixes), which counts in the figure."
        ),
    )
    client = redis.Redis.from_url(ctx.target.url)
    table = Table(["library", "bytes / held lock", "x bare key", "bytes left / name"])
    try:
        bare_held, bare_left = _bare_keys(client, count)
        table.rows.append(
            ["bare SET NX PX key, 16-byte value", fmt(bare_held), "1.00x", fmt(bare_left)]
        )
        for peer in SYNC_PEERS.values():
            repeated = ("redis-py-0.001", "ours-signals", *OBSERVED_PEERS)
            if peer.key in repeated or not peer.exclusive:
                continue  # same keys as another row (a reader's are a writer's)
            reason = peer.skip()
            if reason:
                table.rows.append([peer.label, "skipped", "", reason])
                continue
            try:
                held, left = _peer(ctx, client, peer, count)
            except Exception as exc:
                table.rows.append([peer.label, "failed", "", f"{type(exc).__name__}: {exc}"])
                continue
            ratio = f"{held / bare_held:.2f}x" if bare_held > 0 else "-"
            table.rows.append([peer.label.replace(" sleep=0.1", ""), fmt(held), ratio, fmt(left)])
    finally:
        _flush(client)
        client.close()
    section.tables.append(table)
    section.notes.append(
        "python-redis-lock leaves a signal list per name for `signal_expire` (1 s) after "
        "each release; it is measured right after releasing."
    )
    return section
