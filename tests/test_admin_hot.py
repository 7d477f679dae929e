"""The admin's Hot locks page: families ranked by total wait over a window, from the
history, with counts and percentiles; it checks its permission and says when the history
is off."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_redislock.history import LockEvent
from django_redislock.hot import hot_families, percentile, seconds_text
from tests.test_admin import _client, _staff

pytestmark = pytest.mark.django_db

HOT = "admin:django_redislock_heldlock_hot"
NOW = dt.datetime(2026, 12, 7, 15, 0, tzinfo=dt.timezone.utc)


def ev(type_: str, family: str, **fields: Any) -> LockEvent:
    base: dict[str, Any] = {"fence": None, "holder": "", "waited": None, "held": None}
    base.update(fields)
    return LockEvent(at=NOW, event=type_, name=f"{family}:1", kind="lock", family=family, **base)


def test_families_ranked_by_total_wait() -> None:
    events = [
        *[ev("acquired", "invoice", waited=0.0) for _ in range(8)],
        ev("acquired", "invoice", waited=0.1),
        ev("acquired", "invoice", waited=2.0),
        ev("timed_out", "invoice", waited=5.0),
        *[ev("released", "invoice", held=h) for h in (0.01, 0.02, 0.03, 1.0)],
        ev("lost", "invoice", held=30.0),
        *[ev("acquired", "report", waited=1.0) for _ in range(3)],
        ev("force_released", "report"),
        ev("acquired", "quiet", waited=0.0),
    ]
    ranked = hot_families(events)
    assert [s.family for s in ranked] == ["invoice", "report", "quiet"]
    invoice = ranked[0]
    assert invoice.acquisitions == 10 and invoice.timeouts == 1 and invoice.lost == 1
    assert invoice.total_wait == pytest.approx(7.1)
    assert invoice.wait(0.5) == 0.0 and invoice.wait(0.99) == 5.0
    assert invoice.hold(0.5) == 0.03 and invoice.hold(0.99) == 30.0
    assert ranked[1].lost == 1 and ranked[1].total_wait == 3.0


def test_percentile_and_text() -> None:
    assert percentile([], 0.5) is None
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile(list(range(100)), 0.99) == 98
    assert [seconds_text(v) for v in (None, 0.012, 3.4, 300)] == ["—", "12 ms", "3.4 s", "5 min"]


def test_the_page_from_a_real_history(real_backend: Any, settings: Any) -> None:
    import threading

    from django_redislock import Lock, history

    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    history.enable()
    try:
        holder = Lock("export:1", ttl=30)
        assert holder.acquire()
        assert not Lock("export:1").acquire(timeout=0.05)  # a timeout, waited 50 ms
        done = threading.Event()
        waiter = Lock("export:1", ttl=30)
        threading.Thread(target=lambda: waiter.acquire(timeout=10) and done.set()).start()
        from django_redislock import lock_info
        from tests.support.polling import wait_until

        assert wait_until(lambda: (lock_info("export:1") or holder).waiting == 1, 10)  # type: ignore[union-attr]
        holder.release()
        assert done.wait(10)
        waiter.release()
        with Lock("mail:1", ttl=30):
            pass
        history.flush()
        superuser = User.objects.create_superuser("root", "root@example.com", "pw")
        response = _client(superuser).get(reverse(HOT))
        assert response.status_code == 200
        rows = response.context["rows"]
        assert [r["stats"].family for r in rows] == ["export", "mail"]
        export = rows[0]["stats"]
        assert export.acquisitions == 2 and export.timeouts == 1 and len(export.holds) == 2
        assert export.total_wait > 0.05
        assert 'class="field-family">export<' in response.content.decode()
        assert response.context["window"] == "1h"
        assert _client(superuser).get(reverse(HOT) + "?window=15m").context["window"] == "15m"
        assert _client(superuser).get(reverse(HOT) + "?window=bad").context["window"] == "1h"
    finally:
        history.disable()


def test_the_page_says_when_the_history_is_off(lock_backend: Any) -> None:
    superuser = User.objects.create_superuser("root", "root@example.com", "pw")
    response = _client(superuser).get(reverse(HOT))
    assert response.status_code == 200 and "The history is off" in response.content.decode()


def test_the_page_checks_its_permission(lock_backend: Any) -> None:
    assert _client(_staff("nobody")).get(reverse(HOT)).status_code == 403
    assert _client(_staff("viewer", "view_heldlock")).get(reverse(HOT)).status_code == 200
