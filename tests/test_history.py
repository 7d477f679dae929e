"""The lock history (``REDISLOCK["HISTORY"]``): the engine's events, sent by a background
flusher to one capped stream per connection, read back by ``lock_history()``
(docs/observability.md, "History")."""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.checks import run_checks

from django_redislock import Lock, force_release, history, lock_history
from django_redislock.connection import lock_client
from django_redislock.events import CONTENDED, LockEvent, subscribe, unsubscribe
from django_redislock.exceptions import LockBackendUnavailable
from django_redislock.holder import hostname

HERE = f"{hostname()}:{os.getpid()}"


@pytest.fixture
def history_on(settings: Any) -> Iterator[None]:
    """History on, with the flush left to the test (``history.flush()``) or the thread."""
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    history.enable()
    yield
    history.disable()


def _pending(name: str, type_: str = "acquired") -> history.Pending:
    """A buffered event, as a lock appends it."""
    return (time.time(), LockEvent(type_, "lock", name), "MainThread")


def _cycle(name: str, **options: Any) -> None:
    with Lock(name, ttl=10, **options):
        pass


def test_a_scripted_sequence_gives_exactly_its_events_with_fences(
    lock_backend: Any, history_on: None
) -> None:
    contended = threading.Event()

    def on_event(event: LockEvent) -> None:
        if event.type == CONTENDED:
            contended.set()

    first = Lock("report:1", ttl=10)
    assert first.acquire()
    assert not Lock("report:1").acquire(blocking=False)
    waiter = Lock("report:1", ttl=10)
    granted = threading.Event()
    subscribe(on_event)
    try:
        thread = threading.Thread(
            target=lambda: waiter.acquire(timeout=20) and granted.set(), name="waiter"
        )
        thread.start()
        assert contended.wait(20)
    finally:
        unsubscribe(on_event)
    first.release()
    assert granted.wait(20)
    thread.join(20)
    waiter.release()
    third = Lock("report:1", ttl=10)
    assert third.acquire()
    assert force_release("report:1", user="ops")
    _cycle("other-lock")
    history.flush()

    recorded = lock_history("report:1")
    sequence = [(e.event, e.fence) for e in reversed(recorded)]
    # Each thread reports after Redis answered it: the release handed the lock over, and
    # the heir may say "acquired" before the releaser hears back and says "released".
    assert sequence[:3] == [("acquired", 1), ("busy", 1), ("contended", 1)]
    assert sorted(sequence[3:5]) == [("acquired", 2), ("released", 1)]
    assert sequence[5:] == [("released", 2), ("acquired", 3), ("force_released", 3)]
    if sequence[3] == ("acquired", 2):  # keep the unpacking below in one order
        recorded[-4], recorded[-5] = recorded[-5], recorded[-4]
    ids = [tuple(map(int, e.id.split("-"))) for e in lock_history("report:1")]
    assert ids == sorted(ids, reverse=True)  # newest first
    assert all(abs((e.at - recorded[0].at).total_seconds()) < 60 for e in recorded)
    assert all(e.name == "report:1" and e.kind == "lock" for e in recorded)
    assert all(e.family == "report" for e in recorded)
    acquired_1, busy, contended_event, released_1, acquired_2, released_2, _, forced = reversed(
        recorded
    )
    me = f"{HERE}/MainThread"
    assert acquired_1.holder == me and released_1.holder == me
    assert busy.holder == me and busy.owner == me  # refused by the first holder, here
    assert contended_event.owner == f"{HERE}/waiter" and contended_event.holder == me
    assert acquired_2.holder == f"{HERE}/waiter" and acquired_2.waited and acquired_2.waited > 0
    assert released_2.held is not None and released_2.held >= 0
    assert acquired_1.token == released_1.token != acquired_2.token == released_2.token
    assert forced.holder == me and forced.reason == "by ops" and forced.owner == ""
    assert [e.name for e in lock_history()][:1] == ["other-lock"]  # every lock's, newest first
    assert len(lock_history(limit=3)) == 3


def test_the_stream_stays_capped(lock_backend: Any, history_on: None, settings: Any) -> None:
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY_MAXLEN": 100}
    for _batch in range(6):
        for _ in range(50):
            _cycle("capped")
        history.flush()
    length = lock_client("default").xlen(history.stream_key())
    # MAXLEN ~ trims whole stream nodes (100 entries each by default): at least the cap,
    # less than the cap and a node more.
    assert 100 <= length < 250, length
    assert len(lock_history("capped", limit=10_000)) == length


def test_events_older_than_the_age_are_trimmed(
    lock_backend: Any, history_on: None, settings: Any
) -> None:
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY_MAX_AGE": 3600}
    client = lock_client("default")
    two_hours_ago = int((time.time() - 7200) * 1000)
    client.xadd(history.stream_key(), {"e": "acquired", "n": "old"}, id=f"{two_hours_ago}-0")
    _cycle("new")
    history.flush()
    assert [e.name for e in lock_history()] == ["new", "new"]


def test_since_and_limit(lock_backend: Any, history_on: None) -> None:
    client = lock_client("default")
    an_hour_ago = int((time.time() - 3600) * 1000)
    client.xadd(
        history.stream_key(), {"e": "acquired", "n": "job", "at": "1"}, id=f"{an_hour_ago}-0"
    )
    _cycle("job")
    history.flush()
    assert len(lock_history("job")) == 3
    recent = lock_history("job", since=dt.timedelta(minutes=5))
    assert [e.event for e in recent] == ["released", "acquired"]
    since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    assert lock_history("job", since=since) == recent
    assert lock_history("job", limit=1) == recent[:1]
    assert lock_history("nothing-like-it") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "limit must be a positive int"),
        ({"limit": True}, "limit must be a positive int"),
        ({"since": dt.datetime(2026, 1, 1)}, "aware datetime"),
        ({"since": 60}, "since must be a datetime, a timedelta or None"),
        ({"name": ""}, "name must be a lock name or None"),
    ],
)
def test_bad_arguments_are_named(lock_backend: Any, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        lock_history(**kwargs)


def test_the_history_is_empty_when_off(lock_backend: Any) -> None:
    _cycle("unrecorded")
    assert lock_history() == []
    assert not history.flusher().pending()


def test_the_flusher_adds_no_round_trip_to_acquire_or_release(
    real_backend: Any, settings: Any, monkeypatch: Any
) -> None:
    client = real_backend.client()
    # No flusher thread: its sends would land in the middle of the count by chance. The
    # test flushes itself, after each count.
    monkeypatch.setattr(history.Flusher, "_start", lambda self: None)

    def commands_of_one_cycle() -> dict[str, int]:
        _cycle("counted")  # warm: scripts loaded, connection open
        history.flush()
        before = client.info("commandstats")
        _cycle("counted")
        after = client.info("commandstats")
        skip = {"cmdstat_info", "cmdstat_xadd", "cmdstat_xtrim"}  # the flusher's, if it ran
        return {
            name: stats["calls"] - before.get(name, {"calls": 0})["calls"]
            for name, stats in after.items()
            if name not in skip and stats["calls"] != before.get(name, {"calls": 0})["calls"]
        }

    without = commands_of_one_cycle()
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    history.enable()
    try:
        with_history = commands_of_one_cycle()
        history.flush()
        sent_before = client.info("commandstats").get("cmdstat_xadd", {"calls": 0})["calls"]
        _cycle("counted")
        history.flush()
        sent = client.info("commandstats")["cmdstat_xadd"]["calls"] - sent_before
    finally:
        history.disable()
    # The same commands (the scripts' own calls counted too), two of them sent: EVALSHA.
    assert without == with_history and without["cmdstat_evalsha"] == 2
    assert sent == 2  # acquired and released, by the flusher's one call


def test_an_unreachable_server_drops_batches_logs_once_and_recovers(
    make_server: Any, settings: Any, caplog: Any
) -> None:
    server = make_server()
    settings.CACHES = {
        **settings.CACHES,
        "down": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url},
    }
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    history.enable()
    try:
        _cycle("fragile", connection="down")
        server.kill()
        with caplog.at_level(logging.INFO, logger="django_redislock.history"):
            assert history.flush() == 0  # dropped
            for _ in range(3):
                with pytest.raises(LockBackendUnavailable):
                    Lock("fragile", connection="down", ttl=5).acquire(timeout=0)
                assert history.flush() == 0
            warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
            assert len(warnings) == 1 and "'down'" in warnings[0].getMessage()
            server.restart()
            _cycle("fragile", connection="down")
            # The flusher thread may send one of the two before this flush does; the
            # flush lock makes this call wait for it, so both are in the stream after.
            history.flush()
            assert history.flusher().pending() == 0
            assert any("sent again" in r.getMessage() for r in caplog.records)
        assert [e.event for e in lock_history("fragile", connection="down")] == [
            "released",
            "acquired",
        ]
    finally:
        history.disable()


def test_a_stuck_flusher_never_holds_up_a_lock(
    real_backend: Any, make_server: Any, make_proxy: Any, settings: Any
) -> None:
    proxy = make_proxy(make_server())
    settings.CACHES = {
        **settings.CACHES,
        "slow": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": proxy.url},
    }
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    history.enable()
    try:
        _cycle("slow-one", connection="slow")
        proxy.hold()  # the flusher's next send to "slow" hangs
        history.flusher().add("slow", _pending("slow-one"))
        sending = threading.Thread(target=history.flush, daemon=True)
        sending.start()
        assert not _finished(sending, 0.2)  # stuck on the held proxy
        done = threading.Event()

        def cycles() -> None:
            for _ in range(20):
                _cycle("fast-one")
            done.set()

        threading.Thread(target=cycles, daemon=True).start()
        assert done.wait(30)  # every cycle done while the flush is stuck
        assert history.flusher().pending() >= 40  # buffered, not sent
        proxy.release_hold()
        sending.join(30)
        history.flush()
        assert len(lock_history("fast-one", limit=1000)) == 40
    finally:
        proxy.release_hold()
        history.disable()
        # Close our connections through the proxy before it closes (else a socket it
        # held open is garbage-collected, with a warning, in some later test).
        from django_redislock.connection import reset_clients

        reset_clients()


def _finished(thread: threading.Thread, within: float) -> bool:
    thread.join(within)
    return not thread.is_alive()


def test_a_forked_child_starts_with_an_empty_buffer(lock_backend: Any, history_on: None) -> None:
    history.flusher().add("default", _pending("parent's"))
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's to send, no thread yet
        flusher = history.flusher()
        os._exit(0 if flusher.pending() == 0 and not flusher.running() else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert history.flusher().pending() in (0, 1)  # the parent's thread may have sent it


def test_the_flusher_thread_sends_by_itself_and_stops_cleanly(
    lock_backend: Any, history_on: None
) -> None:
    flusher = history.Flusher()
    flusher.add("default", _pending("by-thread"))
    assert flusher.running()
    from tests.support.polling import wait_until

    assert wait_until(lambda: lock_history("by-thread") != [], 10)
    flusher.add("default", _pending("by-thread", "released"))
    flusher.stop()  # sends what is left
    assert not flusher.running()
    assert [e.event for e in lock_history("by-thread")] == ["released", "acquired"]


@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("HISTORY", "yes", "redislock.E010"),
        ("HISTORY_MAXLEN", 0, "redislock.E012"),
        ("HISTORY_MAXLEN", 2.5, "redislock.E012"),
        ("HISTORY_MAX_AGE", 0, "redislock.E013"),
        ("HISTORY_MAX_AGE", "1h", "redislock.E013"),
    ],
)
def test_bad_history_settings_are_named_by_the_check(
    settings: Any, key: str, value: object, check: str
) -> None:
    settings.REDISLOCK = {**settings.REDISLOCK, key: value}
    [message] = [m for m in run_checks() if m.id == check]
    assert key in message.msg and repr(value) in message.msg


def test_the_app_records_when_history_is_on(settings: Any) -> None:
    from django.apps import apps

    from django_redislock import events

    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    try:
        apps.get_app_config("django_redislock").ready()
        assert events.subscribed(history.record)
    finally:
        history.disable()
    assert not events.subscribed(history.record)


# -- the docs and the command -------------------------------------------------------------


def test_the_docs_examples(lock_backend: Any, history_on: None) -> None:
    from django_redislock.conf import DEFAULTS
    from tests.support.docs_examples import run_example, unnamed_blocks

    assert unnamed_blocks("docs/observability.md") == []
    shown = run_example("docs/observability.md", "history-settings")["REDISLOCK"]
    assert shown == {key: DEFAULTS[key] for key in shown} | {"HISTORY": True}
    recent_waits = run_example("docs/observability.md", "history-read")["recent_waits"]
    _cycle("documented")
    _cycle("documented")
    history.flush()
    waits = recent_waits("documented")
    assert len(waits) == 2 and all(who.startswith(HERE) and w >= 0 for _, who, w in waits)


def _history_command(*args: str) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("redislock", "history", *args, stdout=out)
    return out.getvalue()


def test_the_history_command(lock_backend: Any, history_on: None) -> None:
    import json

    _cycle("cmd:1")
    _cycle("cmd:2")
    history.flush()
    lines = _history_command("cmd:1").splitlines()
    assert len(lines) == 2
    assert "released" in lines[0] and "acquired" in lines[1] and "fence 1" in lines[1]
    assert f"holder {HERE}/MainThread" in lines[0] and "held " in lines[0]
    every = json.loads(_history_command("--json", "--since", "5m"))
    assert [(e["event"], e["name"]) for e in every] == [
        ("released", "cmd:2"),
        ("acquired", "cmd:2"),
        ("released", "cmd:1"),
        ("acquired", "cmd:1"),
    ]
    assert every[0]["fence"] == 1 and every[0]["held"] >= 0 and len(every[0]["token_prefix"]) == 6
    assert len(json.loads(_history_command("--json", "--limit", "1"))) == 1
    assert _history_command("nothing-here") == "No recorded events.\n"


def test_the_history_command_names_a_bad_since(lock_backend: Any) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=r"--since must be .* not 'yesterday'"):
        _history_command("--since", "yesterday")
    with pytest.raises(CommandError, match="--limit must be at least 1"):
        _history_command("--limit", "0")
    assert "(REDISLOCK['HISTORY'] is off)" in _history_command()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", dt.timedelta(seconds=90)),
        ("15m", dt.timedelta(minutes=15)),
        ("1.5h", dt.timedelta(minutes=90)),
        ("2d", dt.timedelta(days=2)),
        ("2026-12-07T10:00:00", dt.datetime(2026, 12, 7, 10, tzinfo=dt.timezone.utc)),
        (
            "2026-12-07T10:00:00+01:00",
            dt.datetime(2026, 12, 7, 9, tzinfo=dt.timezone.utc),
        ),
    ],
)
def test_since_is_parsed(text: str, expected: object) -> None:
    assert history.parse_since(text) == expected
