"""Scenario 6: Redis memory per held lock, what is left per name after release, and what
one waiter's records take."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

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


#: Waiters per kind whose records are measured (a Lock's line is one string, rewritten by
#: each place: keep it short enough for the places to be put well within their lapse).
WAITERS = 200


def _waiters(client: redis.Redis, build: Callable[[str], Any]) -> float:
    """Bytes per waiter: ``WAITERS`` refused attempts that take a place (``waited_ms``
    1) behind a holder, each with a token of its own; their places lapse by themselves."""
    _flush(client)
    holder, waiter = build("bench:s6:waited"), build("bench:s6:waited")
    assert holder.acquire(blocking=False)
    assert not waiter._do_acquire("warm-token-000000000", 1)  # the line's keys exist
    before = _used(client)
    for i in range(WAITERS):
        assert not waiter._do_acquire(f"waiter-token-{i:06d}", 1)
    held = _used(client)
    holder.release()
    return (held - before) / WAITERS


def _waiters_table(client: redis.Redis) -> Table:
    from django_redislock import Lock, ReadWriteLock, Semaphore

    kinds: list[tuple[str, Callable[[str], Any], str]] = [
        ("Lock", lambda name: Lock(name, ttl=TTL), "a place in P:{N}:line (or the claim)"),
        (
            "Semaphore",
            lambda name: Semaphore(name, 1, ttl=TTL),
            "P:{N}:queue, :places, :waiting, :waiting:until",
        ),
        (
            "ReadWriteLock, writer",
            lambda name: ReadWriteLock(name, ttl=TTL).write_lock(),
            "as the semaphore's",
        ),
    ]
    table = Table(["kind", "bytes / waiter", "kept in"])
    for label, build, where in kinds:
        table.rows.append([label, fmt(_waiters(client, build)), where])
    return table


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
        waiters = _waiters_table(client)
    finally:
        _flush(client)
        client.close()
    section.tables.append(table)
    section.tables.append(waiters)
    section.notes.append(
        "python-redis-lock leaves a signal list per name for `signal_expire` (1 s) after "
        "each release; it is measured right after releasing."
    )
    section.notes.append(
        f"Bytes per waiter: {WAITERS} waiters' records behind one holder (each waiter's "
        "place or record, with the holder description inspection shows)."
    )
    return section
