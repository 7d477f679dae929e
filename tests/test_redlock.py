"""Redlock on 3 and 5 private real servers: majorities, faults, fences, crash-restart."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import multiprocessing
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import pytest

from django_redislock import LockBackendUnavailable, LockNotAcquired, LockNotOwned, Redlock
from django_redislock import lock as lock_module
from django_redislock.redlock import clock_drift
from django_redislock.testing import FaultProxy, RedisServer
from django_redislock.transports import node_pool
from tests.support.held import held_at, token_at
from tests.support.polling import wait_until

PREFIX = "redislock"
#: A node timeout with the headroom a loaded machine needs (a busy CI box can leave the
#: event loop thread unscheduled for 100 ms). Tests whose assertion does not depend on
#: the timeout use it; safety never depends on it.
NT = 1.0


def key(name: str) -> str:
    return f"{PREFIX}:{{{name}}}"


def settled(lock: Redlock) -> bool:
    """Wait until every node answered (or timed out) the lock's last step.

    A step returns as soon as a majority decided it; the other nodes' calls go on in the
    background. Tests that look at every node wait for them first.
    """
    return wait_until(lock.transport.idle)


@dataclass
class Cluster:
    servers: list[RedisServer]
    aliases: list[str]
    proxies: dict[int, FaultProxy] = field(default_factory=dict)
    clients: list[Any] = field(default_factory=list)

    def values(self, name: str, nodes: range | list[int] | None = None) -> list[bytes | None]:
        """The lock key on each node (or on ``nodes``), read directly (around any proxy)."""
        indexes = range(len(self.clients)) if nodes is None else nodes
        tokens = [token_at(self.clients[i], key(name)) for i in indexes]
        return [None if token is None else token.encode() for token in tokens]

    def counters(self, name: str) -> list[int]:
        return [int(client.get(key(name) + ":fence") or 0) for client in self.clients]

    def holders(self, name: str) -> int:
        return sum(value is not None for value in self.values(name))

    def heal(self) -> None:
        for server in self.servers:
            if server.paused:
                server.resume()


@pytest.fixture
def cluster(make_server, make_proxy, settings):
    """``cluster(n, proxied=(i, ...))``: n private servers as aliases rl0..rl{n-1}."""
    made: list[Cluster] = []

    def start(n: int, proxied: tuple[int, ...] = ()) -> Cluster:
        servers = [make_server() for _ in range(n)]
        proxies = {i: make_proxy(servers[i]) for i in proxied}
        aliases = [f"rl{i}" for i in range(n)]
        caches = dict(settings.CACHES)
        for i, alias in enumerate(aliases):
            url = proxies[i].url if i in proxies else servers[i].url
            caches[alias] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
        settings.CACHES = caches
        settings.REDISLOCK = {**settings.REDISLOCK, "REDLOCK_CONNECTIONS": aliases}
        c = Cluster(servers, aliases, proxies, [s.client(socket_timeout=5) for s in servers])
        made.append(c)
        return c

    yield start
    for c in made:
        c.heal()
        for client in c.clients:
            client.close()


# -- construction ---------------------------------------------------------------------
@pytest.mark.parametrize("connections", [["a"], ["a", "b"], ["a", "b", "c", "d"], "abc", []])
def test_needs_an_odd_number_of_at_least_three_nodes(connections):
    with pytest.raises(ValueError):
        Redlock("x", connections=connections)


def test_rejects_duplicate_nodes():
    with pytest.raises(ValueError, match="distinct"):
        Redlock("x", connections=["a", "a", "b"])


def test_default_connections_come_from_settings(cluster):
    c = cluster(3)
    lock = Redlock("defaults", ttl=2)
    assert lock.connections == tuple(c.aliases) and lock.quorum == 2
    assert 0.005 <= lock.node_timeout <= 0.25


# -- the basics -----------------------------------------------------------------------
def test_acquire_release_on_every_node(cluster):
    c = cluster(3)
    lock = Redlock("basic", ttl=2)
    before = lock_module.clock()
    assert lock.acquire(timeout=0)
    after = lock_module.clock()
    # a majority answered before acquire returned; the third node's reply may still be
    # on its way (a step does not wait for the slowest node)
    assert sum(v == lock.token.encode() for v in c.values("basic")) >= 2
    assert settled(lock)
    assert c.values("basic") == [lock.token.encode()] * 3
    assert lock.fence == 1 and c.counters("basic") == [1, 1, 1]
    # valid_until = start + ttl - drift, and the validity is left at return
    drift = clock_drift(2)
    assert before + 2 - drift <= lock.valid_until <= after + 2 - drift
    assert lock.owned() and lock.locked() and 1.9 < lock.remaining() <= 2
    other = Redlock("basic", ttl=2)
    assert not other.acquire(timeout=0)
    assert other.locked() and not other.owned()
    assert other.last_holder_ttl is not None and other.last_holder_ttl > 1.5
    lock.release()
    assert c.holders("basic") == 0
    assert not lock.locked() and lock.remaining() is None
    with pytest.raises(LockNotOwned):
        lock.release()
    # the next holder's fence is higher
    with Redlock("basic", ttl=2) as again:
        assert again.fence == 2
    other.acquire()
    with pytest.raises(LockNotAcquired), Redlock("basic", ttl=2, timeout=0):
        pass
    other.release()


def test_extend_needs_a_majority_and_recomputes_validity(cluster):
    c = cluster(3)
    lock = Redlock("ext", ttl=1, node_timeout=NT)
    lock.acquire()
    before = lock_module.clock()
    lock.extend(3)
    assert lock.valid_until >= before + 3 - clock_drift(3)
    assert settled(lock)
    assert all(client.pttl(key("ext")) > 2000 for client in c.clients), [
        client.pttl(key("ext")) for client in c.clients
    ]
    # token gone on 2 of 3 nodes: no majority, LockNotOwned
    c.clients[0].delete(key("ext"))
    c.clients[1].delete(key("ext"))
    with pytest.raises(LockNotOwned):
        lock.extend()
    assert not lock.owned()


# -- release with one node another's and one silent (issue 31, defect 2) ---------------
def _split_hold(cluster: Any, name: str) -> tuple[Cluster, Redlock]:
    """Held on nodes 0 and 2; node 1 has another's value under the key; node 2 is held."""
    c = cluster(3, proxied=(2,))
    c.clients[1].set(key(name), "someone-else", px=30_000)
    lock = Redlock(name, ttl=5, node_timeout=0.2)
    assert lock.acquire(timeout=0)
    assert settled(lock)
    assert c.values(name) == [lock.token.encode(), b"someone-else", lock.token.encode()]
    c.proxies[2].hold()  # no answers from node 2 from now on
    return c, lock


def test_release_within_validity_does_not_blame_a_valid_holder(cluster, caplog):
    c, lock = _split_hold(cluster, "split")
    token = lock.token.encode()
    with caplog.at_level("WARNING", logger="django_redislock.redlock"):
        lock.release()  # no LockNotOwned: one released, one never had it, one silent
    assert lock.token is None
    assert c.values("split") == [None, b"someone-else", token]  # kept there until its TTL
    assert "rl2" in caplog.text and "until its TTL" in caplog.text
    c.proxies[2].release_hold()


def test_arelease_within_validity_does_not_blame_a_valid_holder(cluster):
    c, lock = _split_hold(cluster, "split-async")
    asyncio.run(lock.arelease())
    assert c.values("split-async", [0, 1]) == [None, b"someone-else"]
    c.proxies[2].release_hold()


def test_release_past_validity_needs_a_majority(cluster):
    c, lock = _split_hold(cluster, "split-late")
    lock.valid_until = lock_module.clock() - 0.001  # as if its validity had run out
    with pytest.raises(LockNotOwned):
        lock.release()
    c.proxies[2].release_hold()


def test_release_within_validity_raises_when_a_majority_says_not_ours(cluster):
    c = cluster(3)
    lock = Redlock("taken", ttl=5, node_timeout=NT)
    assert lock.acquire(timeout=0)
    assert settled(lock)
    c.clients[0].set(key("taken"), "force-released-and-retaken")
    c.clients[1].delete(key("taken"))
    with pytest.raises(LockNotOwned):
        lock.release()


# -- the watchdog with one node another's and one silent (issue 51, defect 2) -----------
class _Renewals(logging.Handler):
    """Counts the watchdog's failed renewals it retries (its INFO records)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.retried = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.retried += record.getMessage().startswith("Renewing")


@pytest.fixture
def renewals():
    handler = _Renewals()
    watchdog_logger = logging.getLogger("django_redislock.watchdog")
    level = watchdog_logger.level
    watchdog_logger.addHandler(handler)
    watchdog_logger.setLevel(logging.INFO)
    yield handler
    watchdog_logger.removeHandler(handler)
    watchdog_logger.setLevel(level)


def _split_watched(cluster: Any, name: str) -> tuple[Cluster, Redlock, list[float]]:
    """A watched Redlock held on nodes 0 and 2 (node 1 has another's value); the lost
    times its ``on_lost`` saw."""
    c = cluster(3, proxied=(2,))
    c.clients[1].set(key(name), "someone-else", px=30_000)
    lost_at: list[float] = []
    lock = Redlock(
        name, ttl=1.5, watchdog=True, node_timeout=0.2,
        on_lost=lambda _lock: lost_at.append(lock_module.clock()),
    )  # fmt: skip
    return c, lock, lost_at


def test_the_watchdog_retries_a_split_renewal_within_validity(cluster, renewals):
    """One renewed, one "not ours", one silent: not lost; renewed once the node is back."""
    c, lock, lost_at = _split_watched(cluster, "dog-split")
    assert lock.acquire(timeout=0)
    assert settled(lock)
    c.proxies[2].hold()
    assert wait_until(lambda: renewals.retried >= 1, timeout=5)
    assert not lock.lost and lost_at == []  # marked lost at once before the fix
    c.proxies[2].release_hold()
    retried_until = lock.valid_until
    assert wait_until(lambda: lock.valid_until > retried_until, timeout=5)  # renewed
    assert not lock.lost and lock.owned()
    lock.release()


def test_the_watchdog_marks_a_split_lost_when_validity_runs_out(cluster, renewals):
    c, lock, lost_at = _split_watched(cluster, "dog-split-out")
    assert lock.acquire(timeout=0)
    assert settled(lock)
    c.proxies[2].hold()
    assert wait_until(lambda: renewals.retried >= 1, timeout=5)
    valid_until = lock.valid_until  # the last renewal's validity: none succeeds after it
    assert wait_until(lambda: lost_at, timeout=5)
    assert renewals.retried >= 2 and lost_at[0] >= valid_until
    with pytest.raises(LockNotOwned):
        lock.release()
    c.proxies[2].release_hold()


def test_the_async_watchdog_retries_a_split_renewal_within_validity(cluster, renewals):
    c, lock, lost_at = _split_watched(cluster, "dog-split-async")

    async def until(predicate: Any) -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    async def main() -> None:
        assert await lock.aacquire(timeout=0)
        await asyncio.wait_for(until(lock.transport.idle), 5)
        c.proxies[2].hold()
        await asyncio.wait_for(until(lambda: renewals.retried >= 1), 5)
        assert not lock.lost and lost_at == []
        c.proxies[2].release_hold()
        retried_until = lock.valid_until
        await asyncio.wait_for(until(lambda: lock.valid_until > retried_until), 5)
        assert not lock.lost
        await lock.arelease()

    asyncio.run(main())


def test_an_extend_on_a_split_says_unavailable_not_not_owned(cluster):
    """The same rule for a caller's extend(): a split is not "not ours"."""
    c, lock = _split_hold(cluster, "split-extend")
    with pytest.raises(LockBackendUnavailable, match="not ours on rl1; no answer from rl2"):
        lock.extend()
    assert lock.token is not None and not lock.lost
    c.proxies[2].release_hold()
    lock.extend()
    lock.release()


def test_fencing_off(cluster):
    c = cluster(3)
    with Redlock("nofence", ttl=1, fencing=False, node_timeout=NT) as lock:
        assert lock.fence is None
    assert c.counters("nofence") == [0, 0, 0]


# -- faults ---------------------------------------------------------------------------
def test_one_of_three_frozen_still_acquires(cluster):
    c = cluster(3)
    c.servers[2].pause()
    lock = Redlock("one-frozen", ttl=5, node_timeout=NT)
    assert lock.acquire(timeout=0)
    # a majority answered: acquire returned without waiting for the frozen node's call
    assert not lock.transport.idle()
    assert c.values("one-frozen", [0, 1]) == [lock.token.encode()] * 2
    assert lock.owned()
    lock.release()
    assert c.values("one-frozen", [0, 1]) == [None, None]


def test_two_of_three_frozen_is_backend_unavailable_and_leaves_nothing(cluster):
    c = cluster(3)
    c.servers[1].pause()
    c.servers[2].pause()
    lock = Redlock("two-frozen", ttl=1, node_timeout=NT)
    with pytest.raises(LockBackendUnavailable) as info:
        lock.acquire(timeout=0)
    assert set(info.value.aliases) == {"rl1", "rl2"}
    assert "rl1" in str(info.value) and "rl2" in str(info.value)
    assert info.value.__cause__ is not None
    assert lock.token is None
    # the live node keeps no token of ours (bounded poll: 100 ms)
    assert wait_until(lambda: c.clients[0].get(key("two-frozen")) is None, timeout=0.1)


def test_dropped_replies_leave_no_token(cluster):
    c = cluster(3, proxied=(1,))
    c.clients[0].set(key("dropped"), b"someone-else", px=60000)
    c.proxies[1].drop_replies(True)
    lock = Redlock("dropped", ttl=5, node_timeout=0.3)
    assert not lock.acquire(timeout=0)
    # the acquire reached node 1 (its reply did not): the cleanup deleted it there too
    assert wait_until(lambda: c.values("dropped")[1:] == [None, None], timeout=2.0)
    assert c.values("dropped")[0] == b"someone-else"
    c.proxies[1].drop_replies(False)
    c.proxies[1].reset()


def test_slow_node_never_yields_a_lock_without_validity(cluster):
    c = cluster(3, proxied=(1,))
    c.proxies[1].delay(0.15)  # 300 ms per round trip, ttl 300 ms
    # a) the slow node is not needed: every success has validity left (connections to
    # nodes 0 and 2 warmed first, so that a loaded machine's connect does not eat a 0.3 s TTL)
    with Redlock("slow-a", ttl=5, node_timeout=NT):
        pass
    for _ in range(5):
        lock = Redlock("slow-a", ttl=0.3, node_timeout=1.0)
        assert lock.acquire(timeout=0)
        assert lock_module.clock() < lock.valid_until and not lock.lost
        lock.release()
    # b) the slow node is needed for the majority: its grant comes too late
    c.clients[0].set(key("slow-b"), b"someone-else", px=60000)
    for node_timeout in (1.0, None):
        lock = Redlock("slow-b", ttl=0.3, node_timeout=node_timeout)
        assert not lock.acquire(timeout=0)
        assert lock.token is None
    assert wait_until(lambda: c.values("slow-b")[1:] == [None, None], timeout=2.0)


# -- many clients -----------------------------------------------------------------------
@pytest.mark.slow
def test_three_processes_racing_on_three_nodes(cluster):
    from tests.support.redlock_workers import race_worker

    c = cluster(3)
    urls = [s.url for s in c.servers]
    context = multiprocessing.get_context("spawn")
    duration = 3.0
    ready, go = context.Barrier(4), context.Barrier(4)
    start_at, results = context.Value("d", 0.0), context.Queue()
    args = (urls, "race", duration, 0.5, 0.005, ready, go, start_at, results)
    workers = [context.Process(target=race_worker, args=args) for _ in range(3)]
    for worker in workers:
        worker.start()
    try:
        ready.wait(timeout=60)  # every worker has Django set up and a warm lock
        start_at.value = time.monotonic() + 0.05
        go.wait(timeout=10)
        histories = [results.get(timeout=duration + 30) for _ in workers]
    finally:
        for worker in workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.kill()
    failures = [h for h in histories if isinstance(h, str)]
    assert not failures, failures
    begin = start_at.value
    sections = sorted(s for history in histories for s in history)
    assert sections, "nobody ever acquired"
    # no two critical sections overlap
    for (_, end, _), (start, _, _) in itertools.pairwise(sections):
        assert end <= start
    # fences strictly increase in acquisition order
    fences = [f for *_, f in sections]
    assert all(a < b for a, b in itertools.pairwise(fences))
    # someone acquires at least once a second, every second
    counts: list[int] = []
    for second in range(int(duration)):
        lo, hi = begin + second, begin + second + 1
        count = sum(lo <= s < hi for s, _, _ in sections)
        assert count >= 1, f"no acquisition in second {second}"
        counts.append(count)
    assert all(histories), "a client starved for the whole run"
    print(f"acquisitions per second: {counts}, per client: {[len(h) for h in histories]}")


# -- fences -------------------------------------------------------------------------------
def test_fence_is_written_back_before_the_lock_counts_as_held(cluster):
    c = cluster(3)
    c.clients[0].set(key("wb") + ":fence", 100)
    # node 2 is busy, so the majority must be {0, 1}: node 1's counter (1) lags node 0's
    c.clients[2].set(key("wb"), b"someone-else", px=60000)
    with Redlock("wb", ttl=1, node_timeout=NT) as lock:
        assert lock.fence == 101
        # written back on node 1 before acquire returned: counter >= fence on {0, 1}
        assert c.counters("wb")[:2] == [101, 101]
        held = [held_at(client, key("wb")) for client in c.clients[:2]]
        assert [fence for _, fence, _ in held] == ["101", "101"]  # beside the token
    c.clients[2].delete(key("wb"))
    # a later holder whose majority excludes node 0 ({1, 2}) still gets a higher fence
    c.servers[0].pause()
    with Redlock("wb", ttl=1, node_timeout=NT) as later:
        assert later.fence > 101


def test_fences_strictly_increase_across_200_holders_with_different_majorities(cluster):
    c = cluster(5)
    fences, majorities = [], set()
    paused = None
    for round_no in range(200):
        frozen = c.servers[round_no % 5]
        frozen.pause()
        if paused is not None:
            paused.resume()
        paused = frozen
        # The previous holder's release returned once a majority had released, and the
        # node just resumed answers the previous round's acquire now, then gets its
        # release (a node_timeout longer than a round keeps that acquire waiting rather
        # than timed out and executed later). Wait until those have landed.
        others = [i for i in range(5) if i != round_no % 5]
        assert wait_until(lambda o=others: c.values("fences", o) == [None] * 4), round_no
        lock = Redlock("fences", ttl=0.5, node_timeout=2.0)
        assert lock.acquire(timeout=5), f"round {round_no}"
        fences.append(lock.fence)
        majorities.add(round_no % 5)
        lock.release()
    paused.resume()
    assert all(a < b for a, b in itertools.pairwise(fences)), fences
    assert len(majorities) == 5


# -- crash and restart without persistence --------------------------------------------
def _crash_scenario(c: Cluster, name: str, ttl: float, restart_delay: float) -> bool:
    """A holds {0, 1}; node 1 crashes (no persistence) and comes back after ``restart_delay``;
    B tries to take the lock meanwhile. True when B held it while A's lock was valid."""
    c.clients[2].set(key(name), b"someone-else", px=60000)
    # node_timeout generous for a loaded test machine (safety never depends on it)
    a = Redlock(name, ttl=ttl, node_timeout=0.5)
    # a pooled connection to the node restarted last run fails once: retry within 2 s
    assert a.acquire(timeout=2)
    assert settled(a)  # node 2's refusal is in (not a late grant after the delete)
    c.clients[2].delete(key(name))  # node 2 is free again, node 0 and 1 hold A
    crashed_at = time.monotonic()
    c.servers[1].kill()
    if restart_delay == 0:
        c.servers[1].restart()
    b = Redlock(name, ttl=ttl, node_timeout=0.5)
    overlap = None
    while overlap is None:
        late = time.monotonic() >= crashed_at + restart_delay
        if restart_delay and late and not c.servers[1].running:
            c.servers[1].restart()
        try:
            got = b.acquire(timeout=0)
        except LockBackendUnavailable:
            got = False
        if got:
            overlap = lock_module.clock() < a.valid_until  # B holds while A believes it holds
            with contextlib.suppress(LockNotOwned):  # ttl 0.2 s: may expire on a busy machine
                b.release()
    if not c.servers[1].running:
        c.servers[1].restart()
    for client in c.clients:
        client.delete(key(name))
    return overlap


def test_crash_restart_at_once_breaks_mutual_exclusion(cluster):
    c = cluster(3)
    # the documented hazard: the restarted node forgot A's key, so B wins {1, 2}
    assert _crash_scenario(c, "crash-now", ttl=10.0, restart_delay=0)


@pytest.mark.slow
def test_crash_restart_after_ttl_plus_drift_never_overlaps(cluster):
    c = cluster(3)
    ttl = 0.2
    overlaps = sum(
        _crash_scenario(c, f"crash-late-{run}", ttl=ttl, restart_delay=ttl + clock_drift(ttl))
        for run in range(20)
    )
    assert overlaps == 0


# -- async ----------------------------------------------------------------------------------
def test_async_twins(cluster):
    c = cluster(3)

    async def main():
        lock = Redlock("async", ttl=1, node_timeout=NT)
        assert await lock.aacquire(timeout=0)
        assert sum(v == lock.token.encode() for v in c.values("async")) >= 2
        assert await lock.aowned() and await lock.alocked()
        assert 0.5 < await lock.aremaining() <= 1
        await lock.aextend(2)
        assert 1.5 < await lock.aremaining() <= 2
        other = Redlock("async", ttl=1, node_timeout=NT)
        assert not await other.aacquire(timeout=0)
        await lock.arelease()
        assert not await lock.alocked() and await lock.aremaining() is None
        async with Redlock("async", ttl=1, node_timeout=NT) as held:
            assert held.fence == 2 and await held.aowned()
        c.servers[0].pause()
        async with Redlock("async", ttl=1, node_timeout=NT) as held:
            assert held.fence == 3
        c.servers[1].pause()
        with pytest.raises(LockBackendUnavailable) as info:
            await Redlock("async", ttl=1, node_timeout=NT).aacquire(timeout=0)
        assert set(info.value.aliases) == {"rl0", "rl1"}

    asyncio.run(main())
    c.heal()
    assert wait_until(lambda: c.holders("async") == 0)


def test_async_waiter_is_woken_by_a_release(cluster):
    cluster(3)

    async def main():
        holder = Redlock("async-wait", ttl=5)
        assert await holder.aacquire()
        waiter = Redlock("async-wait", ttl=5)
        task = asyncio.create_task(waiter.aacquire(timeout=3))
        await asyncio.sleep(0.05)
        assert not task.done()
        t0 = time.monotonic()
        await holder.arelease()
        assert await task
        assert time.monotonic() - t0 < 1.0
        await waiter.arelease()

    asyncio.run(main())


def test_watchdog_keeps_a_redlock_alive(cluster):
    c = cluster(3)
    lock = Redlock("dog", ttl=1, watchdog=True, node_timeout=0.3)
    lock.acquire()
    first = lock.valid_until
    # kept alive past two TTLs
    assert wait_until(lambda: lock.valid_until > first + 2, timeout=10)
    assert lock.owned() and not lock.lost
    lock.release()
    assert c.holders("dog") == 0


# -- connections given up on ------------------------------------------------------------
def _sockets_to(port: int) -> int:
    """This process's established TCP connections to ``port`` (psutil: no guessing)."""
    import psutil

    return sum(
        1
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED
    )


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_slow_node_leaves_no_open_connection_behind(cluster, settings, mode):
    c = cluster(3, proxied=(1,))
    slow = c.proxies[1]
    before = _sockets_to(slow.port)

    def scenario() -> list[Redlock]:
        locks = []
        for round_no in range(4):
            # round 0 warms the pool; then every call to node 1 outlives its deadline
            # (600 ms for the healthy two: a busy CI host once made 100 ms, then 300 ms,
            # too short)
            slow.delay(0 if round_no == 0 else 1.2)
            lock = Redlock("slow-gc", ttl=3, node_timeout=0.6)
            assert lock.acquire(timeout=0)
            lock.release()
            locks.append(lock)
        return locks

    async def ascenario() -> list[Redlock]:
        locks = []
        for round_no in range(4):
            slow.delay(0 if round_no == 0 else 1.2)
            lock = Redlock("slow-gc", ttl=3, node_timeout=0.6)
            assert await lock.aacquire(timeout=0)
            await lock.arelease()
            locks.append(lock)
        return locks

    locks = scenario() if mode == "sync" else asyncio.run(ascenario())
    assert all(settled(lock) for lock in locks)
    slow.delay(0)
    # every connection given up on is closed by the library, at once: none is left
    # for the garbage collector, and the sockets to the slow node are back to before
    # (but for a connection whose reply came in time: it is pooled, and closed below)
    pool = node_pool.pool_of("rl1")
    assert pool is not None
    assert wait_until(lambda: _sockets_to(slow.port) <= before + len(pool.idle), timeout=10)
    settings.CACHES = dict(settings.CACHES)  # drop the clients, as a settings change does
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert unclosed == []
    assert _sockets_to(slow.port) == before


def test_calls_in_flight_when_the_settings_change_leave_no_open_connection(cluster, settings):
    c = cluster(3, proxied=(1,))
    slow = c.proxies[1]
    before = _sockets_to(slow.port)
    with Redlock("in-flight", ttl=5):  # warm: node 1 has a pooled connection
        pass
    slow.delay(0.15)  # 300 ms a round trip from now on
    lock = Redlock("in-flight", ttl=5, node_timeout=4.0)
    assert lock.acquire(timeout=0)  # nodes 0 and 2 granted; node 1's grant is on its way
    lock.release()  # node 1's release is queued behind its acquire
    # the clients are dropped while node 1's calls are in flight (a settings change)
    settings.CACHES = dict(settings.CACHES)
    assert settled(lock)
    # the late calls finished on the connections of the settings they began under,
    # and those were closed as they came back: nothing pooled, nothing for the GC
    assert wait_until(lambda: _sockets_to(slow.port) == before, timeout=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_forked_child_leaves_the_parents_connections_alone(cluster):
    cluster(3)
    with Redlock("fork", ttl=5, node_timeout=NT):  # the parent's loop holds pooled connections
        pass
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork with threads
        pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        status = b"?"
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ResourceWarning)
                gc.collect()
            with Redlock("fork-child", ttl=5, node_timeout=NT) as lock:
                held = lock.fence is not None
            unclosed = [w for w in caught if issubclass(w.category, ResourceWarning)]
            status = b"1" if held and not unclosed else b"0"
        finally:
            os.write(write_end, status)
            os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    with os.fdopen(read_end, "rb") as pipe:
        assert pipe.read() == b"1"
    # The child closed only its copies: the parent's pooled connections still answer.
    for _ in range(3):
        with Redlock("fork", ttl=5, node_timeout=NT) as lock:
            assert lock.fence is not None


# -- adopt (the quorum transport reads the holder on a majority) -------------------------
def test_adopt_takes_over_a_redlock_held_on_a_majority(cluster):
    c = cluster(3)
    first = Redlock("adopt", ttl=5, node_timeout=NT)
    assert first.acquire(timeout=0)
    second = Redlock("adopt", ttl=5, node_timeout=NT)
    assert second.adopt(first.token)
    assert second.fence == first.fence and second.owned()
    assert settled(first) and settled(second)  # a node's last reply may still be on its way
    c.clients[0].delete(key("adopt"))  # one node lost it: the majority still holds
    second.release()
    assert c.holders("adopt") == 0
    # gone from a majority: nothing to adopt, and nothing changed
    third = Redlock("adopt", ttl=5, node_timeout=NT)
    assert third.acquire(timeout=0)
    token = third.token
    assert settled(third)  # else its SET could land on node 0 after the DEL below
    c.clients[0].delete(key("adopt"))
    c.clients[1].delete(key("adopt"))
    assert not Redlock("adopt", ttl=5, node_timeout=NT).adopt(token)


def test_aadopt_takes_over_a_redlock(cluster):
    cluster(3)

    async def scenario() -> None:
        first = Redlock("aadopt", ttl=5, node_timeout=NT)
        assert await first.aacquire(timeout=0)
        second = Redlock("aadopt", ttl=5, node_timeout=NT)
        assert await second.aadopt(first.token)
        assert second.fence == first.fence
        await second.arelease()
        assert not await second.alocked()

    asyncio.run(scenario())


# -- nodes that misbehave (issue 36): the majority rule and the clean-up hold ----------------
@pytest.fixture
def misbehaving(cluster, settings):
    """``misbehaving(*modes)``: 3 nodes, the last ``len(modes)`` replaced by scripted
    nodes (:class:`ScriptedNode` modes) or, for ``"late"``, a proxy answering past the
    deadline. Returns (cluster, {alias: port of the misbehaving node})."""
    from tests.support.scripted_node import ScriptedNode

    made: list[ScriptedNode] = []

    def start(*modes: str) -> tuple[Cluster, dict[str, int]]:
        c = cluster(3, proxied=tuple(2 - i for i, m in enumerate(modes) if m == "late"))
        caches, ports = dict(settings.CACHES), {}
        for i, mode in enumerate(modes):
            alias = c.aliases[2 - i]
            if mode == "late":
                c.proxies[2 - i].delay(0.5)  # a round trip of 1 s, past the 0.3 s deadline
                ports[alias] = c.proxies[2 - i].port
                continue
            node = ScriptedNode(mode)  # type: ignore[arg-type]
            made.append(node)
            caches[alias] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": node.url}
            ports[alias] = node.port
        settings.CACHES = caches
        return c, ports

    yield start
    for node in made:
        node.close()


MODES = ["mute", "silent", "late", "half-then-reset"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("caller", ["sync", "async"])
def test_one_misbehaving_node_of_three(misbehaving, mode, caller):
    c, ports = misbehaving(mode)
    (port,) = ports.values()
    lock = Redlock(f"bad-{mode}", ttl=2, node_timeout=0.3)

    async def cycle() -> None:
        assert await lock.aacquire(timeout=0)
        assert c.values(lock.name, [0, 1]) == [lock.token.encode()] * 2
        await lock.arelease()

    if caller == "sync":
        assert lock.acquire(timeout=0)
        assert c.values(lock.name, [0, 1]) == [lock.token.encode()] * 2
        lock.release()
    else:
        asyncio.run(cycle())
    assert c.values(lock.name, [0, 1]) == [None, None]
    assert settled(lock)
    # every connection to the misbehaving node was closed by the library
    assert wait_until(lambda: _sockets_to(port) == 0, timeout=10)


@pytest.mark.parametrize("mode", MODES)
def test_two_misbehaving_nodes_of_three_leave_nothing_behind(misbehaving, mode):
    c, ports = misbehaving(mode, mode)
    lock = Redlock(f"bad2-{mode}", ttl=2, node_timeout=0.3)
    with pytest.raises(LockBackendUnavailable) as raised:
        lock.acquire(timeout=0)
    assert set(raised.value.aliases) == set(ports)
    assert c.values(lock.name, [0]) == [None]  # the one that granted was cleaned up
    assert settled(lock)
    for port in ports.values():
        assert wait_until(lambda port=port: _sockets_to(port) == 0, timeout=10)


def test_the_watchdog_renews_redlocks_on_the_same_nodes_in_one_exchange(cluster):
    """Renewals of several Redlocks over the same nodes share one exchange (pipelined on
    each node's connection), and each lock's outcome is its own."""
    c = cluster(3)
    locks = [Redlock(f"batch-{i}", ttl=5, node_timeout=NT) for i in range(3)]
    for lock in locks:
        assert lock.acquire(timeout=0)
    assert len({lock.transport.renew_group for lock in locks}) == 1
    assert all(settled(lock) for lock in locks)  # no late SET lands after the DELs below
    c.clients[0].delete(key("batch-1"))
    c.clients[1].delete(key("batch-1"))  # batch-1 lost its majority
    ops = [lock.ops.extend(lock.token, 9000) for lock in locks]
    outcomes = locks[0].transport.call_many(ops)
    assert outcomes == [True, False, True]
    assert all(settled(lock) for lock in locks)
    assert all(client.pttl(key("batch-0")) > 5000 for client in c.clients)

    async def arenew() -> list[Any]:
        return await locks[2].transport.acall_many(ops)

    assert asyncio.run(arenew()) == [True, False, True]
    for lock in (locks[0], locks[2]):
        lock.release()
