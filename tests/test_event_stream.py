"""The engine's one event stream (django_redislock.events): every kind reports each outcome
once, from the one acquire loop and the one release / renewal path, sync and async; the
signals are sent from those events (lock_acquire_failed among them)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from django_redislock import (
    Election,
    Lock,
    LockBackendUnavailable,
    LockNotOwned,
    ReadWriteLock,
    Semaphore,
    events,
    force_release,
    signals,
)
from django_redislock.events import LockEvent
from tests.support.polling import wait_until
from tests.test_redlock import cluster  # noqa: F401 (the fixture)

TTL = 1.0


@pytest.fixture
def recorded() -> Iterator[list[LockEvent]]:
    seen: list[LockEvent] = []
    events.subscribe(seen.append)
    yield seen
    events.unsubscribe(seen.append)


def outline(seen: list[LockEvent], name: str) -> list[tuple[str, str]]:
    """(kind, type) of each event of ``name``; renewals that renewed left out (their
    number depends on timing)."""
    return [
        (e.kind, e.type if e.type != events.RENEWAL else f"renewal:{e.result}")
        for e in seen
        if e.name == name and not (e.type == events.RENEWAL and e.result == "renewed")
    ]


# The holder's kind and the contender's, for each kind: a reader contends with a writer.
Factory = Callable[..., Any]
KINDS: dict[str, tuple[Factory, Factory]] = {
    "lock": (Lock, Lock),
    "semaphore": (lambda n, **kw: Semaphore(n, 1, **kw), lambda n, **kw: Semaphore(n, 1, **kw)),
    "write": (
        lambda n, **kw: ReadWriteLock(n, **kw).write_lock(),
        lambda n, **kw: ReadWriteLock(n, **kw).write_lock(),
    ),
    "read": (
        lambda n, **kw: ReadWriteLock(n, **kw).write_lock(),
        lambda n, **kw: ReadWriteLock(n, **kw).read_lock(),
    ),
}


#: The kinds whose refusal names the holder (the shared kinds name none: they have several).
NAMES_ITS_HOLDER = {"lock"}


def expected(holder: str, kind: str) -> list[tuple[str, str]]:
    return [
        (holder, "acquired"),
        (kind, "contended"),
        (kind, "timed_out"),
        (kind, "busy"),
        (holder, "released"),
        (kind, "acquired"),
        (kind, "force_released"),
        (kind, "renewal:lost"),
        (kind, "lost"),
    ]


def script(holder_of: Factory, kind_of: Factory, name: str) -> Any:
    holder = holder_of(name, ttl=TTL)
    assert holder.acquire()
    assert not kind_of(name, ttl=TTL, timeout=0.05).acquire()
    assert not kind_of(name, ttl=TTL).acquire(blocking=False)
    holder.release()
    watched = kind_of(name, ttl=TTL, watchdog=True)
    assert watched.acquire()
    force_release(name)
    assert wait_until(lambda: watched.lost)
    with pytest.raises(LockNotOwned):
        watched.release()  # its loss was reported once already, by the watchdog


async def ascript(holder_of: Factory, kind_of: Factory, name: str) -> Any:
    holder = holder_of(name, ttl=TTL)
    assert await holder.aacquire()
    assert not await kind_of(name, ttl=TTL, timeout=0.05).aacquire()
    assert not await kind_of(name, ttl=TTL).aacquire(blocking=False)
    await holder.arelease()
    watched = kind_of(name, ttl=TTL, watchdog=True)
    assert await watched.aacquire()
    await asyncio.to_thread(force_release, name)
    for _ in range(1000):
        if watched.lost:
            break
        await asyncio.sleep(0.01)
    with pytest.raises(LockNotOwned):
        await watched.arelease()


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_outcome_of_every_kind_once(
    lock_backend: Any, recorded: list[LockEvent], kind: str, mode: str
) -> None:
    holder_of, kind_of = KINDS[kind]
    name = f"ev-{kind}:1"
    if mode == "sync":
        script(holder_of, kind_of, name)
    else:
        asyncio.run(ascript(holder_of, kind_of, name))
    holder_kind = "write" if kind == "read" else kind
    assert outline(recorded, name) == expected(holder_kind, kind)
    of = {e.type: e for e in recorded if e.name == name and e.kind == kind}
    assert of["timed_out"].waited is not None and of["timed_out"].waited >= 0.05
    assert of["timed_out"].attempts is not None and of["timed_out"].attempts >= 1
    assert of["busy"].attempts == 1
    if kind in NAMES_ITS_HOLDER:  # who kept it waiting, from the refusing reply
        assert of["contended"].holder is not None
    assert of["acquired"].fence is not None and of["acquired"].token_prefix
    assert of["lost"].held is not None and of["lost"].held > 0
    assert of["force_released"].holder is not None and of["force_released"].lock is None
    assert {e.family for e in recorded if e.name == name} == {f"ev-{kind}"}
    released = next(e for e in recorded if e.name == name and e.type == "released")
    assert released.held is not None and released.held >= 0


def test_an_election_reports_as_an_election(lock_backend: Any, recorded: list[LockEvent]) -> None:
    leader = Election("ev-leader", ttl=TTL, identity="a")
    other = Election("ev-leader", ttl=TTL, identity="b")
    assert leader.campaign()
    assert not other.campaign(timeout=0.05)
    assert not other.campaign(timeout=0)
    leader.resign()
    assert outline(recorded, "ev-leader") == [
        ("election", "acquired"),
        ("election", "contended"),
        ("election", "timed_out"),
        ("election", "busy"),
        ("election", "released"),
    ]


def test_a_redlock_reports_as_a_redlock(
    cluster: Any,  # noqa: F811 (the fixture)
    recorded: list[LockEvent],
) -> None:
    from django_redislock import Redlock

    cluster(3)
    holder = Redlock("ev-rl", ttl=TTL)
    assert holder.acquire()
    assert not Redlock("ev-rl", ttl=TTL, timeout=0.05).acquire()
    assert not Redlock("ev-rl", ttl=TTL).acquire(blocking=False)
    holder.release()
    assert outline(recorded, "ev-rl") == [
        ("redlock", "acquired"),
        ("redlock", "contended"),
        ("redlock", "timed_out"),
        ("redlock", "busy"),
        ("redlock", "released"),
    ]


def test_a_reentry_is_no_acquisition(lock_backend: Any, recorded: list[LockEvent]) -> None:
    with Lock("ev-re", ttl=TTL, reentrant=True), Lock("ev-re", ttl=TTL, reentrant=True):
        pass
    assert outline(recorded, "ev-re") == [("lock", "acquired"), ("lock", "released")]


def test_a_cancelled_acquire_reports_cancelled(
    lock_backend: Any, recorded: list[LockEvent]
) -> None:
    async def main() -> None:
        holder = Lock("ev-cancel", ttl=TTL)
        assert await holder.aacquire()
        waiter = asyncio.ensure_future(Lock("ev-cancel", ttl=TTL).aacquire())
        while not any(e.type == "contended" for e in recorded):
            await asyncio.sleep(0.005)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await holder.arelease()

    asyncio.run(main())
    assert outline(recorded, "ev-cancel") == [
        ("lock", "acquired"),
        ("lock", "contended"),
        ("lock", "cancelled"),
        ("lock", "released"),
    ]


# -- the signals come from the events ---------------------------------------------------------


@pytest.fixture
def failures() -> Iterator[list[dict[str, Any]]]:
    seen: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.lock_acquire_failed.connect(receiver)
    yield seen
    signals.lock_acquire_failed.disconnect(receiver)


def test_lock_acquire_failed_says_why_and_how_long(
    real_backend: Any, failures: list[dict[str, Any]], recorded: list[LockEvent]
) -> None:
    holder = Lock("ev-fail", ttl=5)
    assert holder.acquire()
    timed = Lock("ev-fail", ttl=5, timeout=0.05)
    assert not timed.acquire()
    busy = Lock("ev-fail", ttl=5)
    assert not busy.acquire(blocking=False)
    real_backend.server.stop()
    down = Lock("ev-fail", ttl=5)
    with pytest.raises(LockBackendUnavailable):
        down.acquire()
    assert [(f["lock"], f["reason"], f["sender"]) for f in failures] == [
        (timed, "timeout", Lock),
        (busy, "busy", Lock),
        (down, "unavailable", Lock),
    ]
    assert failures[0]["waited"] >= 0.05
    failed = next(e for e in recorded if e.type == "failed")
    assert failed.lock is down and failed.reason
    with pytest.raises(LockBackendUnavailable):
        holder.release()  # the server is still down: this process holds it no more
    assert outline(recorded, "ev-fail")[-1] == ("lock", "lost")


def test_the_old_signals_are_sent_once_each(lock_backend: Any) -> None:
    got: list[tuple[str, Any]] = []

    def on(name: str) -> Callable[..., None]:
        def receiver(sender: Any, **kwargs: Any) -> None:
            got.append((name, kwargs.get("lock") or kwargs.get("name")))

        return receiver

    receivers = {
        signals.lock_acquired: on("acquired"),
        signals.lock_released: on("released"),
        signals.lock_lost: on("lost"),
        signals.lock_force_released: on("force_released"),
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver)
    try:
        first = Lock("ev-sig", ttl=TTL)
        with first:
            pass
        second = Lock("ev-sig", ttl=TTL)
        second.acquire()
        force_release("ev-sig")
        with pytest.raises(LockNotOwned):
            second.release()
        with pytest.raises(LockNotOwned):
            second.release()  # nothing held: no second report
    finally:
        for signal, receiver in receivers.items():
            signal.disconnect(receiver)
    assert got == [
        ("acquired", first),
        ("released", first),
        ("acquired", second),
        ("force_released", "ev-sig"),
        ("lost", second),
    ]
