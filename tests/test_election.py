"""Leader election (DESIGN §10): one leader at a time, in-process and across real processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from django_redislock import Election, force_release
from django_redislock.holder import hostname
from tests.support.polling import wait_until

TTL = 1.0
RENEW = TTL / 3


# -- in one process ----------------------------------------------------------------------


def test_campaign_leads_and_a_rival_waits(lock_backend):
    elected = []
    first = Election("jobs", ttl=5, identity="node-a", on_elected=elected.append)
    rival = Election("jobs", ttl=5, identity="node-b")
    assert not first.is_leader and first.fence is None
    assert first.campaign(timeout=1)
    assert first.is_leader and first.fence == 1 and elected == [first]
    assert not rival.campaign(timeout=0.05)
    assert not rival.is_leader
    info = rival.leader()
    assert info is not None and info.purpose == "node-a" and info.fence == 1
    first.resign()
    assert not first.is_leader and first.fence == 1  # the last term stays readable
    assert rival.campaign(timeout=1) and rival.fence == 2  # terms strictly grow
    rival.resign()
    assert rival.leader() is None
    first.resign()  # resigning when not leading does nothing


def test_default_identity_is_host_and_pid(lock_backend):
    with Election("ident") as election:
        assert election.identity == f"{hostname()}:{os.getpid()}"
        info = election.leader()
        assert info is not None and info.purpose == election.identity
    assert not election.is_leader


def test_loss_is_reported_once_and_is_leader_turns_false(lock_backend):
    lost = threading.Event()
    calls = []

    def on_lost(election):
        calls.append(election.fence)
        lost.set()

    election = Election("taken", ttl=TTL, on_lost=on_lost)
    assert election.campaign(timeout=1)
    assert force_release("taken")
    assert lost.wait(10)  # at the next renewal
    assert not election.is_leader and calls == [1]
    election.resign()  # the lease is gone: nothing raises
    assert calls == [1]


def test_a_failing_callback_does_not_hide_the_leadership(lock_backend, caplog):
    def boom(election):
        raise RuntimeError("receiver bug")

    election = Election("cb", ttl=5, on_elected=boom)
    assert election.campaign(timeout=1) and election.is_leader
    assert "on_elected callback failed" in caplog.text
    election.resign()


def test_campaign_twice_is_an_error(lock_backend):
    election = Election("twice", ttl=5)
    assert election.campaign(timeout=1)
    with pytest.raises(RuntimeError, match="Already leading 'twice'"):
        election.campaign(timeout=1)
    election.resign()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ttl": -1}, "ttl must be > 0"),
        ({"identity": ""}, "identity must be a non-empty str"),
        ({"on_elected": "nope"}, "on_elected must be callable"),
        ({"on_lost": 3}, "on_lost must be callable"),
        ({"connection": ""}, "connection must be a cache alias"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Election("bad", **kwargs)


def test_async_twins(lock_backend):
    async def main():
        rival = Election("async-jobs", ttl=5)
        async with Election("async-jobs", ttl=TTL, identity="a") as election:
            assert election.is_leader and election.fence == 1
            assert not await rival.acampaign(timeout=0.05)
            info = await rival.aleader()
            assert info is not None and info.purpose == "a"
            await asyncio.sleep(TTL * 1.5)  # renewed on this loop past its TTL
            assert election.is_leader
        assert not election.is_leader
        assert await rival.acampaign(timeout=1) and rival.fence == 2
        await rival.aresign()
        assert await rival.aleader() is None

    asyncio.run(main())


def test_cut_off_leader_stops_leading_in_time(make_server, make_proxy, settings):
    # The fault proxy holds every byte (a partition): renewals cannot reach Redis.
    server = make_server()
    proxy = make_proxy(server)
    settings.CACHES = {
        **settings.CACHES,
        "cut": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": proxy.url,
            "OPTIONS": {"SOCKET_TIMEOUT": 0.2, "SOCKET_CONNECT_TIMEOUT": 0.2},
        },
    }
    lost = threading.Event()
    calls = []
    election = Election(
        "cut", ttl=TTL, connection="cut", on_lost=lambda e: (calls.append(1), lost.set())
    )
    assert election.campaign(timeout=2)
    proxy.hold()
    cut_at = time.monotonic()
    # Whatever the watchdog manages, the lease it renewed last (before the cut) ends
    # within TTL of the cut: by then is_leader must be False, told or not.
    time.sleep(max(0.0, cut_at + TTL - time.monotonic()))
    assert not election.is_leader
    assert lost.wait(10)
    proxy.release_hold()
    time.sleep(RENEW)  # a renewal interval more: still once
    assert calls == [1]
    election.resign()


# -- real processes ----------------------------------------------------------------------


@dataclass
class Event:
    kind: str
    stamp: int
    pid: int
    term: int


def read_log(path: Path) -> list[Event]:
    events = []
    for line in path.read_text().splitlines():
        kind, stamp, pid, term = line.split()
        events.append(Event(kind, int(stamp), int(pid), int(term)))
    return events


def leadership_violations(events: list[Event]) -> list[str]:
    """Safety: by time, the terms acting as leader never go back (two leaders at once)."""
    acts = sorted((e for e in events if e.kind in ("elected", "tick")), key=lambda e: e.stamp)
    problems, newest = [], None
    for event in acts:
        if newest is not None and event.term < newest.term:
            problems.append(
                f"pid {event.pid} acted with term {event.term} at {event.stamp} after "
                f"pid {newest.pid} led with term {newest.term} at {newest.stamp}"
            )
        if newest is None or event.term > newest.term:
            newest = event
    return problems


class Candidates:
    def __init__(self, url: str, name: str, log: Path, mode: str = "election") -> None:
        self.log = log
        log.touch()
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        self.procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.election_workers",
                    url,
                    name,
                    str(TTL),
                    mode,
                    str(log),
                ],
                env=env,
            )
            for _ in range(3 if mode == "election" else 2)
        ]

    def events(self) -> list[Event]:
        return read_log(self.log)

    def elected(self, after: int = 0, besides: tuple[int, ...] = ()) -> Event | None:
        for event in self.events():
            if event.kind == "elected" and event.stamp > after and event.pid not in besides:
                return event
        return None

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
            proc.wait(10)


@pytest.fixture
def candidates(real_backend, tmp_path):
    made: list[Candidates] = []

    def start(mode: str = "election") -> Candidates:
        group = Candidates(real_backend.url, "leader", tmp_path / f"{mode}.log", mode)
        made.append(group)
        return group

    yield start
    for group in made:
        group.close()


def _pause_leader_until_another_leads(group: Candidates) -> tuple[Event, Event]:
    assert wait_until(lambda: group.elected() is not None)
    first = group.elected()
    os.kill(first.pid, signal.SIGSTOP)
    try:
        assert wait_until(lambda: group.elected(besides=(first.pid,)) is not None)
    finally:
        os.kill(first.pid, signal.SIGCONT)
    return first, group.elected(besides=(first.pid,))


@pytest.mark.slow
def test_three_processes_one_leader_through_pause_and_kill(candidates):
    group = candidates()
    first, second = _pause_leader_until_another_leads(group)
    # The paused leader wakes, sees it no longer leads (lost), told once by on_lost.
    assert wait_until(lambda: any(e.kind == "lost" and e.pid == first.pid for e in group.events()))
    assert wait_until(
        lambda: any(e.kind == "on_lost" and e.pid == first.pid for e in group.events())
    )
    killed_at = time.monotonic_ns()
    os.kill(second.pid, signal.SIGKILL)
    assert wait_until(lambda: group.elected(after=killed_at, besides=(second.pid,)) is not None)
    third = group.elected(after=killed_at, besides=(second.pid,))
    # Another leads within one TTL plus one renewal interval of the kill (plus scheduling
    # slack on a loaded machine: the bound is the protocol's, not a speed claim).
    assert (third.stamp - killed_at) / 1e9 <= TTL + RENEW + 1.0
    group.close()
    events = group.events()
    assert leadership_violations(events) == []
    terms = [e.term for e in sorted(events, key=lambda e: e.stamp) if e.kind == "elected"]
    assert terms == sorted(set(terms)) and len(terms) >= 3  # strictly growing
    on_lost = [e for e in events if e.kind == "on_lost" and e.pid == first.pid]
    assert len(on_lost) == 1


@pytest.mark.slow
def test_the_checker_catches_a_renewal_that_re_acquires(candidates):
    # Protection switched off: a plain SET instead of the owner-checked renewal.
    group = candidates("broken")
    first, _ = _pause_leader_until_another_leads(group)
    resumed_at = time.monotonic_ns()
    assert wait_until(
        lambda: any(
            e.kind == "tick" and e.pid == first.pid and e.stamp > resumed_at for e in group.events()
        )
    )
    group.close()
    assert leadership_violations(group.events()) != []


# -- inspection ----------------------------------------------------------------------------


def test_inspection_shows_an_election_as_kind_election_with_its_term(lock_backend, admin_client):
    from django.urls import reverse

    from django_redislock import held_locks, lock_info
    from django_redislock.inspection import RELEASED, force_release_holder

    first = Election("shown", ttl=5, identity="node-a")
    assert first.campaign(timeout=1)
    first.resign()
    second = Election("shown", ttl=5, identity="node-b")
    assert second.campaign(timeout=1)  # term 2
    rival = Election("shown", ttl=5, identity="node-c")
    waiting = threading.Thread(target=rival.campaign, kwargs={"timeout": 5})
    waiting.start()
    try:
        assert wait_until(lambda: (i := lock_info("shown")) is not None and i.waiters, 5)
        info = lock_info("shown")
        assert info is not None
        assert (info.kind, info.term, info.kind_text) == ("election", 2, "election, term 2")
        assert info.purpose == "node-b"
        assert [(w.purpose, w.kind) for w in info.waiters] == [("node-c", "election")]
        assert [(i.name, i.kind, i.term) for i in held_locks("shown")] == [("shown", "election", 2)]
        page = admin_client.get(reverse("admin:django_redislock_heldlock_change", args=["shown"]))
        assert "election, term 2" in page.content.decode()
        # Released as what it is: the leader loses its term, the rival takes the next.
        assert force_release_holder("shown", token=info.token).status == RELEASED
        waiting.join(5)
        assert rival.is_leader and rival.fence == 3
        assert wait_until(lambda: not second.is_leader, 5)  # its watchdog finds out
    finally:
        rival.resign()
        waiting.join(5)
        second.resign()


def test_a_plain_lock_keeps_its_kind_and_has_no_term(lock_backend):
    from django_redislock import Lock, lock_info

    with Lock("plain", ttl=5):
        info = lock_info("plain")
        assert info is not None and (info.kind, info.term, info.kind_text) == ("lock", None, "lock")
