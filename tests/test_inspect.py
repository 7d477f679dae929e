"""Inspection API: held_locks, scan_page, lock_info, force_release (DESIGN §2)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from typing import Any

import pytest
from django.test import override_settings

from django_redislock import (
    Lock,
    LockBackendUnavailable,
    LockHolder,
    LockInfo,
    alock_info,
    force_release,
    held_locks,
    inspection,
    lock_info,
)
from django_redislock.holder import SEPARATOR
from django_redislock.inspection import (
    CHANGED_HANDS,
    NOT_HELD,
    RELEASED,
    force_release_holder,
    glob_escape,
    lock_key_pattern,
    scan_page,
    search_pattern,
)
from django_redislock.signals import lock_force_released


def hold_raw(
    client: Any,
    names: Any,
    *,
    prefix: str = "redislock",
    ttl_ms: int = 600_000,
    host: str = "worker-1",
    pid: int = 4242,
    purpose: str = "raw test lock",
    batch: int = 2_000,
) -> dict[str, str]:
    """Hold many locks fast: raw SETs in the lock key layout, pipelined.

    Returns {name: token}. The layout is that of scripts/acquire.lua (held.lua: the
    token, the fence and the one-field holder description of django_redislock.holder).
    """
    tokens: dict[str, str] = {}
    pipe = client.pipeline(transaction=False)
    for i, name in enumerate(names, 1):
        key = f"{prefix}:{{{name}}}"
        token = f"tok{i:07d}-{name}"
        tokens[name] = token
        holder = SEPARATOR.join(
            [host, str(pid), "MainThread", purpose, repr(time.time()), "0", str(ttl_ms)]
        )
        pipe.set(key, f"{token}\x1e1\x1e{holder}", px=ttl_ms)
        pipe.incr(f"{key}:fence")
        if i % batch == 0:
            pipe.execute()
    pipe.execute()
    return tokens


def without_ttl(info: LockInfo) -> LockInfo:
    """``info`` with its TTLs blanked: two reads a few ms apart differ only there."""
    holders = tuple(dataclasses.replace(h, ttl=None) for h in info.holders)
    return dataclasses.replace(info, ttl=None, holders=holders)


def add_junk(client: Any, count: int) -> None:
    """Unrelated cache keys, some of them looking almost like lock keys."""
    pipe = client.pipeline(transaction=False)
    for start in range(0, count, 1000):
        pipe.mset({f"junk:{i}": b"x" for i in range(start, min(count, start + 1000))})
    pipe.set("redislock:{ghost}:meta", "not a lock")  # companion key without its lock
    pipe.set("redislock:{ghost}:fence", 3)
    pipe.set("redislock:plain", "no hash tag")
    pipe.set("other:{report}", "another prefix")
    pipe.set(b"redislock:{\xff\xfe}", b"not utf-8")
    pipe.execute()


def test_held_locks_lists_only_locks_with_their_holders(lock_backend):
    raw = lock_backend.client()
    add_junk(raw, 500)
    with Lock("report:daily", ttl=20, purpose="nightly report") as first, Lock("invoice:7"):
        infos = {info.name: info for info in held_locks()}
        # The undecodable key is not one of ours and yields no entry for "ghost".
        assert set(infos) - {"\ufffd\ufffd"} == {"report:daily", "invoice:7"}
        info = infos["report:daily"]
        assert isinstance(info, LockInfo)
        assert info.key == "redislock:{report:daily}"
        assert info.token == first.token
        assert info.fence == first.fence == 1
        assert 19 < info.ttl <= 20
        assert info.purpose == "nightly report"
        assert info.owner.pid is not None and info.owner.host and info.owner.thread
        assert info.watchdog is False
        assert info.connection == "default"
        assert isinstance(info.acquired_at, dt.datetime) and info.acquired_at.tzinfo
        assert abs(info.acquired_at.timestamp() - time.time()) < 5
        assert info.short_token == first.token[:6] + "…"
    assert [i.name for i in held_locks() if "\ufffd" not in i.name] == []


def test_a_lock_has_one_holder_and_its_kind(lock_backend):
    with Lock("kinded", ttl=20, purpose="one holder") as lock:
        info = lock_info("kinded")
        listed = next(i for i in held_locks("kinded"))
        token, fence = lock.token, lock.fence
    assert without_ttl(info) == without_ttl(listed)
    assert (info.kind, info.limit) == ("lock", None)
    [holder] = info.holders
    assert isinstance(holder, LockHolder)
    # The single-holder fields describe that holder.
    assert holder.token == info.token == token
    assert holder.fence == info.fence == fence
    assert holder.owner == info.owner
    assert (holder.purpose, holder.acquired_at, holder.watchdog) == (
        info.purpose, info.acquired_at, info.watchdog,
    )  # fmt: skip
    assert holder.ttl == info.ttl and 19 < holder.ttl <= 20
    assert holder.short_token == info.short_token


def test_raw_locks_read_back(lock_backend):
    hold_raw(lock_backend.client(), ["raw"], host="web-7", pid=99, purpose="p", ttl_ms=9_000)
    info = lock_info("raw")
    assert (info.owner.host, info.owner.pid, info.owner.thread) == ("web-7", 99, "MainThread")
    assert info.purpose == "p" and info.fence == 1 and 8 < info.ttl <= 9
    assert info.watchdog is False and info.acquired_at is not None


def test_pattern_and_literal_names(lock_backend):
    names = ["report:1", "report:2", "reports", "a*b", "a?b", "a[1]", "a\\b", "axb", "ünï"]
    tokens = hold_raw(lock_backend.client(), names)

    def found(pattern: str) -> set[str]:
        return {info.name for info in held_locks(pattern)}

    assert found("*") == set(tokens)
    assert found("report:*") == {"report:1", "report:2"}
    assert found("report?") == {"reports"}
    assert found("a?b") == {"a*b", "a?b", "a\\b", "axb"}
    assert found("ünï") == {"ünï"}
    for name in ["a*b", "a?b", "a[1]", "a\\b"]:
        assert found(glob_escape(name)) == {name}, name
    assert found(search_pattern("report")) == {"report:1", "report:2", "reports"}
    assert found(search_pattern("*b")) == {"a*b", "a?b", "a\\b", "axb"}
    assert found(search_pattern("[")) == {"a[1]"}  # literal text: "contains ["
    assert found("nothing*") == set()


def test_prefix_is_matched_literally(lock_backend):
    raw = lock_backend.client()
    hold_raw(raw, ["x1"], prefix="app[1]*")
    hold_raw(raw, ["x2"], prefix="app1")
    hold_raw(raw, ["x3"], prefix="app[1]*zzz")
    with override_settings(REDISLOCK={"KEY_PREFIX": "app[1]*"}):
        assert lock_key_pattern("x*") == "app\\[1\\]\\*:{x*}"
        assert [info.name for info in held_locks()] == ["x1"]
        assert lock_info("x1").token.startswith("tok")


def test_bad_arguments():
    with pytest.raises(ValueError, match="never contain"):
        list(held_locks("a{b}"))
    with pytest.raises(ValueError):
        list(held_locks(""))
    with pytest.raises(ValueError, match="count"):
        list(held_locks(count=0))
    with pytest.raises(ValueError, match="page_size"):
        scan_page(page_size=0)
    with pytest.raises(ValueError, match="cursor"):
        scan_page(cursor="not-a-cursor")
    with pytest.raises(ValueError, match="token"):
        force_release_holder("x", token="")


def test_fixed_count_and_expired_keys(real_backend):
    raw = real_backend.client()
    hold_raw(raw, [f"n{i}" for i in range(50)])
    hold_raw(raw, ["short"], ttl_ms=1)
    time.sleep(0.01)
    names = [info.name for info in held_locks(count=7)]
    assert sorted(names) == sorted(f"n{i}" for i in range(50))
    # A key that vanished between SCAN and the pipelined read is skipped.
    assert inspection._read_batch(raw, [b"redislock:{gone}"], "default") == []


def test_scan_page_walks_every_lock_once(real_backend):
    raw = real_backend.client()
    add_junk(raw, 3_000)
    tokens = hold_raw(raw, [f"job:{i:05d}" for i in range(1_500)])
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        infos, cursor = scan_page("*", cursor, 100)
        pages += 1
        seen.extend(info.name for info in infos)
        assert len(infos) < 400  # whole SCAN batches, but COUNT adapts to the page size
        if cursor is None:
            break
        assert len(infos) >= 100
    assert pages >= 5
    # SCAN may return an element twice (rehashing) but never misses one held throughout.
    assert set(seen) == set(tokens)
    assert len(seen) - len(set(seen)) < 50


def test_scan_page_time_budget_and_sparse_search(real_backend):
    raw = real_backend.client()
    add_junk(raw, 20_000)
    hold_raw(raw, ["needle", "other"])
    # With no time at all, a page is one SCAN batch: maybe empty, with a cursor to go on.
    infos, cursor = scan_page("needle", None, 100, max_seconds=0)
    assert cursor is not None and len(infos) <= 1
    found = list(infos)
    while cursor is not None:
        infos, cursor = scan_page("needle", cursor, 100, max_seconds=0)
        found.extend(infos)
    assert [info.name for info in found] == ["needle"]
    # Without a budget one call scans to the end.
    infos, cursor = scan_page("needle", None, 100)
    assert cursor is None and [info.name for info in infos] == ["needle"]


class _FakeNode:
    def __init__(self, client: Any) -> None:
        self.redis_connection = client


class _FakeCluster:
    """What held_locks needs of a redis-py RedisCluster: its primaries."""

    def __init__(self, clients: list[Any]) -> None:
        self.clients = clients

    def get_primaries(self) -> list[_FakeNode]:
        return [_FakeNode(c) for c in self.clients]


def test_scans_every_primary_of_a_cluster(make_server, monkeypatch):
    servers = [make_server(), make_server()]
    clients = [s.client() for s in servers]
    hold_raw(clients[0], [f"a{i}" for i in range(150)])
    hold_raw(clients[1], [f"b{i}" for i in range(150)])
    monkeypatch.setattr(inspection, "lock_client", lambda alias: _FakeCluster(clients))
    expected = {f"a{i}" for i in range(150)} | {f"b{i}" for i in range(150)}
    assert {info.name for info in held_locks()} == expected
    seen: set[str] = set()
    cursor = None
    while True:
        infos, cursor = scan_page("*", cursor, 40)
        seen.update(info.name for info in infos)
        if cursor is None:
            break
        assert "-" in cursor  # node index and that node's SCAN cursor
    assert seen == expected
    for client in clients:
        client.close()


def test_force_release_reports_the_holder_it_removed(lock_backend):
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    lock_force_released.connect(receiver)
    try:
        holder = Lock("job", ttl=10, purpose="the job")
        holder.acquire()
        result = force_release_holder("job", user="admin")
        assert result.status == RELEASED and result
        assert result.info.token == holder.token and result.info.purpose == "the job"
        assert received[-1]["info"] == result.info
        assert received[-1]["user"] == "admin" and received[-1]["name"] == "job"
        assert lock_info("job") is None
        assert holder.lost or not holder.owned()

        assert force_release_holder("job").status == NOT_HELD
        assert force_release("job") is False

        second = Lock("job", ttl=10)
        second.acquire()
        assert second.fence == 2  # the fence is not reset
        stale = force_release_holder("job", token="someone-else")
        assert stale.status == CHANGED_HANDS and not stale
        assert stale.info.token == second.token
        assert lock_info("job").token == second.token
        assert force_release("job", token=second.token) is True
        assert len(received) == 2
    finally:
        lock_force_released.disconnect(receiver)


def test_force_release_without_token_retries_when_the_holder_changes(lock_backend, monkeypatch):
    Lock("churn", ttl=10).acquire()
    real_lock_info = inspection.lock_info
    calls = 0

    def lock_info_then_take_over(name: str, **kwargs: Any) -> Any:
        # The first read sees holder A; before the delete, holder B takes over.
        nonlocal calls
        calls += 1
        info = real_lock_info(name, **kwargs)
        if calls == 1:
            lock_backend.client().delete("redislock:{churn}", "redislock:{churn}:meta")
            Lock("churn", ttl=10, purpose="holder B").acquire()
        return info

    monkeypatch.setattr(inspection, "lock_info", lock_info_then_take_over)
    result = force_release_holder("churn")
    assert result.status == RELEASED
    assert result.info.purpose == "holder B"
    assert calls == 2


def test_unreachable_server_raises_backend_unavailable(settings, real_backend):
    real_backend.server.stop()
    with pytest.raises(LockBackendUnavailable):
        list(held_locks())
    with pytest.raises(LockBackendUnavailable):
        scan_page()


def test_the_old_module_name_still_imports_with_a_deprecation_warning(monkeypatch):
    import importlib
    import sys

    monkeypatch.delitem(sys.modules, "django_redislock.inspect", raising=False)
    with pytest.warns(DeprecationWarning, match="django_redislock.inspection"):
        old = importlib.import_module("django_redislock.inspect")
    assert old is inspection
    assert old.held_locks is inspection.held_locks


def test_alock_info_reads_what_lock_info_reads(lock_backend) -> None:
    import asyncio

    assert asyncio.run(alock_info("reader")) is None
    lock = Lock("reader", ttl=10, purpose="nightly report")
    assert lock.acquire(timeout=0)
    info = asyncio.run(alock_info("reader"))
    assert info is not None and info.purpose == "nightly report" and info.fence == lock.fence
    sync = lock_info("reader")
    assert sync is not None and without_ttl(sync) == without_ttl(info)
    lock.release()


def test_alock_info_names_an_unreachable_server(settings) -> None:
    import asyncio

    settings.CACHES = {
        **settings.CACHES,
        "gone": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        },
    }
    with pytest.raises(LockBackendUnavailable, match="'gone'"):
        asyncio.run(alock_info("reader", connection="gone"))


@pytest.mark.parametrize("kind", ["lock", "semaphore", "write"])
def test_a_force_released_holder_gets_lock_lost_when_its_with_block_ends(lock_backend, kind):
    """What the admin's force-release does to the holder (README, admin-and-commands.md):
    nothing at once; ``LockLost`` when its ``with`` block ends."""
    from django_redislock import LockLost, ReadWriteLock, Semaphore

    lock = {
        "lock": lambda: Lock("forced", ttl=5),
        "semaphore": lambda: Semaphore("forced", limit=2, ttl=5),
        "write": lambda: ReadWriteLock("forced", ttl=5).write_lock(),
    }[kind]()
    ran = []
    with pytest.raises(LockLost), lock:
        info = lock_info("forced")
        assert info is not None
        assert force_release("forced", token=info.token)
        ran.append("the block went on")
    assert ran == ["the block went on"]
