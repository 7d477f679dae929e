"""Locks on a real 3-primary Redis Cluster (``redis-cli --cluster create``).

The cluster is reached through ``REDISLOCK["CONNECTIONS"]`` (django-redis has no
cluster client): a redis-py ``RedisCluster`` with retries off.
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from django_redislock import Lock, drivers, force_release, held_locks, lock_info
from django_redislock.connection import lock_client, pubsub_client, scan_clients
from django_redislock.transports.replicated import call_and_wait
from tests.support.cluster import Cluster, cli_spec, cluster_increment_worker
from tests.support.held import held_at

pytestmark = pytest.mark.skipif(
    cli_spec() is None, reason="no redis-cli / valkey-cli next to the server binary"
)

ALIAS = "locks"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with Cluster() as running:
        yield running


@pytest.fixture
def on_cluster(cluster: Cluster, settings: Any) -> Iterator[Cluster]:
    """REDISLOCK points at the cluster; the cluster starts empty."""
    for node in cluster.nodes:
        with node.client() as client:
            client.flushall()
    settings.REDISLOCK = {
        **settings.REDISLOCK,
        "CONNECTION": ALIAS,
        "CONNECTIONS": {ALIAS: {"URL": cluster.urls, "CLUSTER": True}},
    }
    yield cluster


def names_on_every_node(cluster: Cluster, per_node: int = 2) -> list[str]:
    """Lock names whose keys land on each of the nodes (``per_node`` per node)."""
    found: dict[int, list[str]] = {n.port or 0: [] for n in cluster.nodes}
    for i in itertools.count():
        name = f"job-{i}"
        port = cluster.owner_of(f"redislock:{{{name}}}").port or 0
        if len(found[port]) < per_node:
            found[port].append(name)
        if all(len(v) == per_node for v in found.values()):
            return [name for names in found.values() for name in names]
    raise AssertionError("unreachable")


def test_locks_in_different_slots(on_cluster: Cluster) -> None:
    names = names_on_every_node(on_cluster)
    locks = [Lock(name) for name in names]
    for lock in locks:
        assert lock.acquire(timeout=0)
    # each lock's keys sit together on the node serving the lock's slot
    for lock in locks:
        owner = on_cluster.owner_of(lock.key)
        with owner.client() as raw:
            assert held_at(raw, lock.key)[:2] == (lock.token, str(lock.fence))
            assert int(raw.get(f"{lock.key}:fence")) == lock.fence
        assert Lock(lock.name).acquire(timeout=0) is False
        assert lock.owned() and 0 < lock.remaining() <= 5
    for lock in locks:
        lock.extend(3)
        lock.release()
        assert not lock.locked()
    again = Lock(names[0])
    assert again.acquire(timeout=0) and again.fence == 2
    again.release()


def test_semaphores_in_different_slots(on_cluster: Cluster) -> None:
    from django_redislock import Semaphore, lock_info

    for name in names_on_every_node(on_cluster):
        first, second = Semaphore(name, 2, ttl=5), Semaphore(name, 2, ttl=5)
        assert first.acquire(timeout=0) and second.acquire(timeout=0)
        assert not Semaphore(name, 2).acquire(timeout=0)
        waiter = Semaphore(name, 2, ttl=5)
        assert not waiter.acquire(timeout=0.2)  # it stood in line, then left it
        owner = on_cluster.owner_of(first.key)
        with owner.client() as raw:  # every key of the name on the node of its slot
            assert raw.zcard(first.key) == 2 and raw.hlen(f"{first.key}:meta") == 2
            assert int(raw.get(f"{first.key}:fence")) == second.fence == 2
        info = lock_info(name)
        assert info is not None and (info.kind, len(info.holders)) == ("semaphore", 2)
        first.release()
        assert waiter.acquire(timeout=0) and waiter.fence == 3
        second.release()
        waiter.release()
        assert lock_info(name) is None


def test_read_write_locks_in_different_slots(on_cluster: Cluster) -> None:
    from django_redislock import ReadWriteLock, lock_info

    for name in names_on_every_node(on_cluster):
        rw = ReadWriteLock(name, ttl=5)
        first, second = rw.read_lock(), rw.read_lock()
        assert first.acquire(timeout=0) and second.acquire(timeout=0)
        writer = rw.write_lock()
        assert not writer.acquire(timeout=0.2)  # it stood in line, then left it
        owner = on_cluster.owner_of(first.key)
        with owner.client() as raw:  # every key of the name on the node of its slot
            assert raw.scard(first.key) == 2 and raw.zcard(f"{first.key}:leases") == 2
            assert int(raw.get(f"{first.key}:fence")) == second.fence == 2
        info = lock_info(name)
        assert info is not None and (info.kind, len(info.holders)) == ("read", 2)
        first.release()
        second.release()
        assert writer.acquire(timeout=0) and writer.fence == 3
        assert lock_info(name).kind == "write"
        writer.release()
        assert lock_info(name) is None


def test_multilock_over_names_in_different_slots(on_cluster: Cluster) -> None:
    from django_redislock import MultiLock

    names = names_on_every_node(on_cluster, per_node=1)
    assert len({on_cluster.owner_of(f"redislock:{{{n}}}").port for n in names}) == 3
    with MultiLock(names, ttl=5) as multi:
        assert set(multi.fences) == set(names) and all(multi.fences.values())
        assert {info.name for info in held_locks(connection=ALIAS)} == set(names)
        assert not MultiLock([names[0], "elsewhere"], ttl=5).acquire(blocking=False)
        assert lock_info("elsewhere") is None  # none taken: all or none
    assert all(lock_info(name) is None for name in names)


def test_multilock_money_on_the_cluster(on_cluster: Cluster, tmp_path: Any) -> None:
    from tests.test_multilock_processes import check_bank, run_bank

    accounts = names_on_every_node(on_cluster, per_node=2)[:4]
    db_path = str(tmp_path / "bank.sqlite")
    moves = run_bank(on_cluster.url, db_path, accounts, cluster=True)
    check_bank(db_path, moves)


def test_scan_clients_are_the_primaries(on_cluster: Cluster) -> None:
    clients = scan_clients(ALIAS)
    ports = sorted(c.connection_pool.connection_kwargs["port"] for c in clients)
    assert ports == sorted(n.port for n in on_cluster.nodes)


def test_listing_across_nodes_and_force_release(on_cluster: Cluster) -> None:
    names = names_on_every_node(on_cluster)
    locks = [Lock(name, purpose="cluster test") for name in names]
    for lock in locks:
        assert lock.acquire(timeout=0)
    listed = {info.name: info for info in held_locks(connection=ALIAS)}
    assert set(listed) == set(names)
    assert all(info.purpose == "cluster test" for info in listed.values())
    assert lock_info(names[-1], connection=ALIAS).token == locks[-1].token

    # force-release reaches the node that holds each lock, and wakes its waiters
    victim = locks[0]
    got: list[bool] = []
    successor = Lock(victim.name)
    waiter = threading.Thread(target=lambda: got.append(successor.acquire(timeout=4)))
    waiter.start()
    time.sleep(0.3)
    started = time.monotonic()
    assert force_release(victim.name, connection=ALIAS)
    waiter.join(5)
    assert got == [True]
    assert time.monotonic() - started < 1.0  # woken by the release, not by the TTL
    assert not force_release("never-held", connection=ALIAS)
    assert lock_info(victim.name, connection=ALIAS).token == successor.token
    assert successor.fence == victim.fence + 1  # the fence survives a force-release
    for lock in [successor, *locks[1:]]:
        lock.release()
    assert list(held_locks(connection=ALIAS)) == []


def test_release_wakes_waiters_on_every_node(on_cluster: Cluster) -> None:
    """PUBLISH from a script reaches the one subscriber, whichever node it is on."""
    for name in names_on_every_node(on_cluster, per_node=1):
        holder = Lock(name)
        assert holder.acquire(timeout=0)
        result: list[float] = []

        def wait(name: str = name, result: list[float] = result) -> None:
            lock = Lock(name, timeout=4)
            assert lock.acquire()
            result.append(time.monotonic())
            lock.release()

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)
        released = time.monotonic()
        holder.release()
        thread.join(5)
        assert result and result[0] - released < 0.5, f"{name}: not woken by the release"


def test_pubsub_client_is_a_plain_node_client(on_cluster: Cluster) -> None:
    client = pubsub_client(ALIAS)
    assert client.connection_pool.connection_kwargs["port"] in {n.port for n in on_cluster.nodes}
    assert client.ping()


def test_moved_during_resharding(on_cluster: Cluster) -> None:
    """A slot moves to another node while held: the holder and newcomers follow MOVED."""
    lock = Lock("resharded", ttl=5)
    assert lock.acquire(timeout=0)
    lock_client(ALIAS)  # the cached slot map now points at the old node
    source = on_cluster.owner_of(lock.key)
    target = next(n for n in on_cluster.nodes if n is not source)
    on_cluster.migrate_slot(on_cluster.keyslot(lock.key), target)
    assert on_cluster.owner_of(lock.key) is target

    assert Lock("resharded").acquire(timeout=0) is False  # MOVED followed, still held
    lock.extend()
    assert lock.owned()
    lock.release()
    second = Lock("resharded")
    assert second.acquire(timeout=0)
    assert second.fence == 2  # the fence counter moved with the slot
    second.release()

    # the WAIT path pins one node: it follows MOVED too
    source = on_cluster.owner_of("redislock:{resharded}")
    target = next(n for n in on_cluster.nodes if n is not source)
    on_cluster.migrate_slot(on_cluster.keyslot("redislock:{resharded}"), target)
    third = Lock("resharded")
    op = third.ops.acquire("tok")
    (ok, fence), acked = drivers.run(call_and_wait(ALIAS, lock_client(ALIAS), op, 0, 100))
    assert (ok, fence, acked) == (1, 3, 0)


async def test_async_on_cluster(on_cluster: Cluster) -> None:
    names = names_on_every_node(on_cluster, per_node=1)
    locks = [Lock(name) for name in names]
    for lock in locks:
        assert await lock.aacquire(timeout=0)
        assert await lock.aowned()
        assert not await Lock(lock.name).aacquire(timeout=0)
    for lock in locks:
        await lock.aextend()
        await lock.arelease()
        assert not await lock.alocked()

    holder = Lock(names[0])
    await holder.aacquire()
    waiter = Lock(names[0], timeout=4)
    task = asyncio.ensure_future(waiter.aacquire())
    await asyncio.sleep(0.3)
    released = time.monotonic()
    await holder.arelease()
    assert await task
    assert time.monotonic() - released < 0.5
    await waiter.arelease()


def test_contention_across_processes(on_cluster: Cluster, tmp_path: Any) -> None:
    names = names_on_every_node(on_cluster, per_node=1)
    db_path = str(tmp_path / "resource.sqlite3")
    with sqlite3.connect(db_path) as db:
        db.execute("CREATE TABLE resource (name TEXT PRIMARY KEY, counter INT, fence INT)")
        db.executemany("INSERT INTO resource VALUES (?, 0, 0)", [(n,) for n in names])
    processes, iterations = 4, 30
    context = multiprocessing.get_context("spawn")
    with context.Pool(processes) as pool:
        results = pool.starmap(
            cluster_increment_worker,
            [(on_cluster.url, db_path, names, iterations)] * processes,
        )
    sections = [s for history in results for s in history]
    assert len(sections) == processes * iterations
    assert all(accepted for *_, accepted in sections)
    with sqlite3.connect(db_path) as db:
        counters = dict(db.execute("SELECT name, counter FROM resource").fetchall())
    assert sum(counters.values()) == processes * iterations
    for name in names:
        mine = sorted((start, end, fence) for n, start, end, fence, _ in sections if n == name)
        for (_, end, fence_a), (start, _, fence_b) in itertools.pairwise(mine):
            assert end <= start and fence_a < fence_b


def test_unreachable_cluster_is_backend_unavailable(settings: Any) -> None:
    from django_redislock import LockBackendUnavailable

    settings.REDISLOCK = {
        **settings.REDISLOCK,
        "CONNECTIONS": {"gone": {"URL": "redis://127.0.0.1:1", "CLUSTER": True}},
    }
    with pytest.raises(LockBackendUnavailable):
        Lock("x", connection="gone").acquire(timeout=0)


def test_checks_accept_connections_names(on_cluster: Cluster, settings: Any) -> None:
    from django_redislock.checks import check_eviction_policy, check_settings

    assert [m.id for m in check_settings()] == []
    for node in on_cluster.nodes[1:]:  # one primary evicts: found on whichever node it is
        with node.client() as client:
            client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert [m.id for m in check_eviction_policy()] == ["redislock.W001", "redislock.W003"]
    finally:
        for node in on_cluster.nodes:
            with node.client() as client:
                client.config_set("maxmemory-policy", "noeviction")
    settings.REDISLOCK = {
        **settings.REDISLOCK,
        "CONNECTIONS": {ALIAS: {"URL": ["redis://a:1", "redis://b:2"]}},
    }
    [error] = check_settings()
    assert error.id == "redislock.E006" and "only for CLUSTER" in error.msg
