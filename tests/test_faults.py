"""The quick form of the fault-injection suite (``python -m tests.faults`` runs it N times).

Every scenario runs once with its protection switched off — the checker MUST find a
violation there, so no checker passes by being blind — and once with it on, where it
must find none. See ``tests/faults/`` and ``docs/reliability.md``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from tests.faults.harness import (
    FencedReadResource,
    RedisResource,
    check_counter,
    check_fences,
    check_issued_fences,
    check_windows,
)
from tests.faults.scenarios import SCENARIOS, Lab

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    lab = Lab()
    yield lab
    lab.close()


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scenario(name: str, lab: Lab) -> None:
    scenario = SCENARIOS[name]
    reason = scenario.available()
    if reason:
        pytest.skip(reason)
    blind = scenario.run(lab, False)
    assert blind.violations, (
        f"{name}: with the protection off ({scenario.unprotected}) the checker found nothing"
    )
    result = scenario.run(lab, True)
    assert result.violations == [], f"{name}: {result.violations} (notes: {result.notes})"


# -- the checkers on hand-made histories ---------------------------------------------------


def line(worker, op, invoke, complete, ok=True, fence=None, validity=None):
    return {
        "worker": worker,
        "op": op,
        "token": None,
        "fence": fence,
        "invoke_ns": invoke,
        "complete_ns": complete,
        "ok": ok,
        "validity_ns": validity,
    }


def test_check_fences():
    assert check_fences([(1, "a", 1), (2, "b", 2), (5, "a", 3)]) == []
    assert len(check_fences([(1, "a", 1), (3, "b", 2), (3, "a", 3)])) == 1
    assert len(check_fences([(2, "a", 1), (1, "b", 2)])) == 1


def test_check_counter():
    assert check_counter(2, [(1, "a", 1), (2, "b", 2)], "r") == []
    assert check_counter(1, [(1, "a", 1), (2, "b", 1)], "r")  # a lost update


def test_check_windows_uses_validity_and_release():
    ok = [
        line("a", "acquire", 0, 10, fence=1, validity=100),
        line("b", "acquire", 50, 110, fence=2, validity=100),  # a's validity ended at 100
        line("a", "release", 200, 210, ok=False),
        line("b", "release", 220, 230),
    ]
    assert check_windows(ok) == []
    naive = [dict(x, validity_ns=None) for x in ok]  # believes it until the release
    assert len(check_windows(naive)) == 1
    renewed = [*ok[:2], dict(ok[2], validity_ns=150), ok[3]]  # a renewal moved it on
    assert len(check_windows(renewed)) == 1
    released_first = [
        line("a", "acquire", 0, 10, fence=1),
        line("a", "release", 40, 45),
        line("b", "acquire", 50, 60, fence=2),
    ]
    assert check_windows(released_first) == []
    failed = [line("a", "acquire", 0, 10, fence=1), line("b", "acquire", 5, 6, ok=False)]
    assert check_windows(failed) == []


def test_check_issued_fences():
    assert check_issued_fences([line("a", "acquire", 0, 1, fence=1)]) == []
    back = [line("a", "acquire", 0, 1, fence=4), line("b", "acquire", 2, 3, fence=1)]
    assert len(check_issued_fences(back)) == 1


# -- found by the suite ------------------------------------------------------------------------


# Found by the lifecycle scenario (redis-py 8 caps a pool at 100 connections); fixed by
# REDISLOCK["MAX_CONNECTIONS"] blocking pools.
async def test_more_concurrent_async_acquires_than_the_pool_cap(real_backend):
    from django_redislock import Lock

    locks = [Lock(f"burst-{i}", ttl=5) for i in range(150)]
    results = await asyncio.gather(*(lock.aacquire(timeout=0) for lock in locks))
    assert all(results)
    await asyncio.gather(*(lock.arelease() for lock in locks))


def test_fenced_reads_close_the_lost_update_write_only_fences_let_in(make_server) -> None:
    # A (fence 5) reads, is paused past its TTL; B (fence 6) reads; A's late write lands
    # before B's: write-only fencing accepts both and one increment is lost (what a 30 s
    # soak once found). Fencing the read too refuses A's write.
    url = make_server().url
    plain, fenced = RedisResource(url), FencedReadResource(url)
    for resource in (plain, fenced):
        resource.create()
    a, b = plain.read(), plain.read()
    assert plain.write(a + 1, 5, "A") and plain.write(b + 1, 6, "B")
    assert check_counter(plain.read(), plain.accepted(), "plain")  # the lost update

    a, b = fenced.fenced_read(5), fenced.fenced_read(6)
    assert a == b == 0
    assert not fenced.write(a + 1, 5, "A")  # B has read: A's write is refused
    assert fenced.fenced_read(5) is None  # so is A reading again
    assert fenced.write(b + 1, 6, "B")
    assert check_counter(fenced.read(), fenced.accepted(), "fenced") == []
