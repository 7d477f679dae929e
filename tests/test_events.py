"""The event stream's pieces: families (bounded label values), metrics_name on every kind,
the event kinds, and emit/subscribe. The engine's events themselves: test_event_stream.py."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.checks import run_checks

from django_redislock import Election, Lock, MultiLock, ReadWriteLock, Semaphore, events, locked
from django_redislock.events import LockEvent, family_of
from django_redislock.naming import CallNamer


@pytest.fixture(autouse=True)
def fresh_families() -> Iterator[None]:
    events.reset_families()
    yield
    events.reset_families()


def test_family_is_the_name_up_to_its_first_colon() -> None:
    assert family_of("invoice:42") == "invoice"
    assert family_of("invoice:42:pdf") == "invoice"
    assert family_of("nightly-report") == "nightly-report"
    assert Lock("export:7").family == "export"


def test_metrics_name_wins_over_the_name() -> None:
    assert family_of("invoice:42", "billing") == "billing"
    assert Lock("invoice:42", metrics_name="billing").family == "billing"


def test_ten_thousand_names_give_bounded_families() -> None:
    """One family per prefix until the cap (200 by default), then "other" for the rest;
    the set the process keeps stops growing at the cap."""
    seen = {Lock(f"job{i}:{i}").family for i in range(10_000)}
    assert len(events.known_families()) == 200
    assert len(seen) == 201
    assert events.OTHER in seen
    # A family given out before the cap stays itself.
    assert Lock("job0:again").family == "job0"
    assert Lock("job9999:again").family == events.OTHER


def test_names_of_one_family_take_one_place() -> None:
    seen = {Lock(f"invoice:{i}").family for i in range(10_000)}
    assert seen == {"invoice"}
    assert events.known_families() == {"invoice"}


def test_the_cap_comes_from_the_settings(settings: Any) -> None:
    settings.REDISLOCK = {**settings.REDISLOCK, "METRICS_FAMILIES": 2}
    assert [family_of(f"f{i}:x") for i in range(4)] == ["f0", "f1", "other", "other"]


@pytest.mark.parametrize("bad", ["", "  ", 5, b"x", "x" * 201])
def test_a_bad_metrics_name_is_refused_by_every_kind(bad: object) -> None:
    for make in (
        lambda: Lock("a", metrics_name=bad),  # type: ignore[arg-type]
        lambda: Semaphore("a", 2, metrics_name=bad),  # type: ignore[arg-type]
        lambda: ReadWriteLock("a", metrics_name=bad),  # type: ignore[arg-type]
        lambda: MultiLock(["a", "b"], metrics_name=bad),  # type: ignore[arg-type]
        lambda: Election("a", metrics_name=bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(ValueError, match="metrics_name must be"):
            make()


def test_every_kind_takes_metrics_name_and_says_its_kind() -> None:
    rw = ReadWriteLock("doc:1", metrics_name="docs")
    multi = MultiLock(["account:1", "account:2"], metrics_name="transfer")
    election = Election("leader:eu", metrics_name="leaders")
    kinds = {
        "lock": Lock("doc:1"),
        "semaphore": Semaphore("doc:1", 2, metrics_name="docs"),
        "read": rw.read_lock(),
        "write": rw.write_lock(),
        "election": election._new_lock(None),
    }
    assert {kind: lock.event_kind for kind, lock in kinds.items()} == {k: k for k in kinds}
    assert kinds["semaphore"].family == kinds["read"].family == kinds["write"].family == "docs"
    assert {part.family for part in multi.parts} == {"transfer"}
    assert kinds["election"].family == "leaders"


def test_redlock_reports_its_own_kind() -> None:
    from django_redislock import Redlock

    assert Redlock._event_kind == "redlock"


def test_a_decorators_template_is_its_family() -> None:
    """Every invoice's lock is one family, named by the template, not by an invoice."""
    namer = CallNamer("invoice:{invoice_id}", lambda invoice_id: None, where="test")
    assert namer.metrics_name == "invoice:{invoice_id}"
    assert namer.lock_options({"ttl": 5}) == {"metrics_name": "invoice:{invoice_id}", "ttl": 5}
    # Given explicitly, it is kept; a fixed name or a callable leaves the name's own rule.
    assert namer.lock_options({"metrics_name": "billing"}) == {"metrics_name": "billing"}
    assert CallNamer("nightly", lambda: None, where="test").metrics_name is None
    assert CallNamer(lambda: "x:1", lambda: None, where="test").metrics_name is None


def test_a_decorated_functions_locks_carry_the_template() -> None:
    from django_redislock import signals

    families: list[str] = []

    def took(sender: Any, lock: Any, **kwargs: Any) -> None:
        families.append(lock.family)

    @locked("invoice:{invoice_id}", ttl=5)
    def pay(invoice_id: int) -> int:
        return invoice_id

    @locked("invoice:{invoice_id}", ttl=5, metrics_name="payments")
    def refund(invoice_id: int) -> int:
        return invoice_id

    signals.lock_acquired.connect(took)
    try:
        assert pay(1) == 1 and pay(2) == 2 and refund(3) == 3
    finally:
        signals.lock_acquired.disconnect(took)
    assert families == ["invoice:{invoice_id}", "invoice:{invoice_id}", "payments"]


# -- emit / subscribe -----------------------------------------------------------------------


def _event(**fields: Any) -> LockEvent:
    defaults = {"type": events.ACQUIRED, "kind": "lock", "name": "a"}
    return LockEvent(**{**defaults, **fields})


def test_every_consumer_gets_each_event_once_in_order() -> None:
    seen: list[tuple[str, str]] = []

    def first(event: LockEvent) -> None:
        seen.append(("first", event.type))

    def second(event: LockEvent) -> None:
        seen.append(("second", event.type))

    events.subscribe(first)
    events.subscribe(second)
    events.subscribe(first)  # once, however often asked
    try:
        events.emit(_event(type=events.RELEASED))
    finally:
        events.unsubscribe(first)
        events.unsubscribe(second)
    assert seen == [("first", "released"), ("second", "released")]
    events.emit(_event())
    assert len(seen) == 2


def test_a_failing_consumer_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    seen: list[str] = []

    def broken(event: LockEvent) -> None:
        raise RuntimeError("dashboard down")

    events.subscribe(broken)
    events.subscribe(seen.append)  # type: ignore[arg-type]
    try:
        with caplog.at_level(logging.ERROR, logger="django_redislock.events"):
            events.emit(_event(name="invoice:1"))
    finally:
        events.unsubscribe(broken)
        events.unsubscribe(seen.append)  # type: ignore[arg-type]
    assert len(seen) == 1
    assert "failed on acquired of 'invoice:1'" in caplog.text
    assert "dashboard down" in caplog.text


def test_a_consumer_must_be_callable() -> None:
    with pytest.raises(TypeError, match="must be callable, not 5"):
        events.subscribe(5)  # type: ignore[arg-type]


def test_every_event_type_is_listed() -> None:
    listed = events.TYPES
    assert listed == {
        "acquired",
        "contended",
        "timed_out",
        "busy",
        "failed",
        "cancelled",
        "released",
        "lost",
        "force_released",
        "deadlock",
        "renewal",
    }


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "check"),
    [
        ("METRICS", "yes", "redislock.E010"),
        ("TRACING", 1, "redislock.E010"),
        ("METRICS_FAMILIES", 0, "redislock.E011"),
        ("METRICS_FAMILIES", True, "redislock.E011"),
        ("METRICS_FAMILIES", 2.5, "redislock.E011"),
    ],
)
def test_bad_observability_settings_are_named_by_the_check(
    settings: Any, key: str, value: object, check: str
) -> None:
    settings.REDISLOCK = {**settings.REDISLOCK, key: value}
    [message] = [m for m in run_checks() if m.id == check]
    assert key in message.msg and repr(value) in message.msg


def test_the_observability_defaults_pass_the_checks() -> None:
    assert not [m for m in run_checks() if m.id in {"redislock.E010", "redislock.E011"}]
