"""The admin's Waiting page and the waiting column of the held-locks list: every waiter
longest first, with what blocks it; the page checks its permission; it reads only the
locks someone waits for, and works on a custom AdminSite (docs/admin-and-commands.md)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User
from django.urls import reverse

from django_redislock import Lock, ReadWriteLock, Semaphore, lock_info
from django_redislock.inspection import waited_locks
from tests.support.polling import wait_until
from tests.test_admin import CHANGELIST, _client, _staff

pytestmark = pytest.mark.django_db

WAITING = "admin:django_redislock_heldlock_waiting"


class Waiters:
    """Threads waiting for locks (each its own lock object), stopped at the end."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.locks: list[Any] = []

    def wait_for(self, lock: Any, thread_name: str) -> None:
        self.locks.append(lock)
        thread = threading.Thread(
            target=lambda: lock.acquire(timeout=30) and lock.release(), name=thread_name
        )
        thread.start()
        self.threads.append(thread)
        name = lock.name
        count = len([lk for lk in self.locks if lk.name == name])
        assert wait_until(lambda: (lock_info(name) or _empty).waiting == count, 10)


class _Empty:
    waiting = 0


_empty = _Empty()


@pytest.fixture
def waiters() -> Iterator[Waiters]:
    made = Waiters()
    yield made
    for thread in made.threads:
        thread.join(40)


def test_every_waiter_longest_first_with_what_blocks_it(
    real_backend: Any, waiters: Waiters
) -> None:
    holder = Lock("invoice:9", ttl=30, purpose="billing.pay")
    permits = [Semaphore("exports", 1, ttl=30, purpose="export") for _ in range(1)]
    writer = ReadWriteLock("catalog", ttl=30, purpose="rebuild").write_lock()
    quiet = Lock("held-quietly", ttl=30)
    for lock in (holder, *permits, writer, quiet):
        assert lock.acquire()
    try:
        waiters.wait_for(Lock("invoice:9", ttl=30, purpose="refund"), "refunder")
        waiters.wait_for(Semaphore("exports", 1, ttl=30, purpose="export-2"), "exporter")
        waiters.wait_for(ReadWriteLock("catalog", ttl=30, purpose="browse").read_lock(), "reader")
        waiters.wait_for(Lock("invoice:9", ttl=30, purpose="refund-2"), "refunder-2")
        infos = waited_locks()
        assert sorted(i.name for i in infos) == ["catalog", "exports", "invoice:9"]

        superuser = User.objects.create_superuser("root", "root@example.com", "pw")
        response = _client(superuser).get(reverse(WAITING))
        assert response.status_code == 200
        rows = response.context["rows"]
        assert [(r["info"].name, r["waiter"].purpose) for r in rows] == [
            ("invoice:9", "refund"),
            ("exports", "export-2"),
            ("catalog", "browse"),
            ("invoice:9", "refund-2"),
        ]
        assert [r["waiter"].kind for r in rows] == ["lock", "semaphore", "read", "lock"]
        threads = [r["waiter"].thread for r in rows]
        assert threads == ["refunder", "exporter", "reader", "refunder-2"]
        assert rows[0]["blocked_by"] == [f"{holder_owner(holder)} (billing.pay)"]
        assert rows[2]["blocked_by"] == [f"{holder_owner(writer)} (rebuild)"]
        page = response.content.decode()
        assert page.count('class="field-lock"') == 4
        assert "4 waiters for 3 locks." in page
        assert reverse("admin:django_redislock_heldlock_change", args=[quote("invoice:9")]) in page

        listing = _client(superuser).get(reverse(CHANGELIST))
        waiting = {r["info"].name: r["info"].waiting for r in listing.context["rows"]}
        assert waiting == {"invoice:9": 2, "exports": 1, "catalog": 1, "held-quietly": 0}
        listed = listing.content.decode()
        assert re.search(r'class="field-waiting heldlock-num"><a href="[^"]+">2</a>', listed)
        assert reverse(WAITING) in listed  # linked from the list
    finally:
        for lock in (holder, *permits, writer, quiet):
            lock.release()


def holder_owner(lock: Any) -> str:
    info = lock_info(lock.name)
    assert info is not None
    return str(info.holders[0].owner)


def test_nobody_waits(real_backend: Any) -> None:
    superuser = User.objects.create_superuser("root", "root@example.com", "pw")
    with Lock("alone", ttl=30):
        response = _client(superuser).get(reverse(WAITING))
    assert response.status_code == 200
    assert "Nobody waits for a lock." in response.content.decode()


def test_the_waiting_page_checks_its_permission(lock_backend: Any) -> None:
    assert _client(_staff("nobody")).get(reverse(WAITING)).status_code == 403
    assert _client(_staff("viewer", "view_heldlock")).get(reverse(WAITING)).status_code == 200


def test_an_unreachable_server_is_said_on_the_page(settings: Any, lock_backend: Any) -> None:
    settings.CACHES = {
        **settings.CACHES,
        "default": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        },
    }
    superuser = User.objects.create_superuser("root", "root@example.com", "pw")
    response = _client(superuser).get(reverse(WAITING))
    assert response.status_code == 200
    assert "unavailable" in response.context["error"]


def test_a_locks_page_shows_its_waiters_recent_events_and_timeline(
    real_backend: Any, waiters: Waiters, settings: Any
) -> None:
    from django_redislock import history

    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    history.enable()
    try:
        for _ in range(3):
            with Lock("nightly", ttl=30):
                pass
        holder = Lock("nightly", ttl=30)
        assert holder.acquire()
        waiters.wait_for(Lock("nightly", ttl=30, purpose="second run"), "second")
        history.flush()
        superuser = User.objects.create_superuser("root", "root@example.com", "pw")
        detail = reverse("admin:django_redislock_heldlock_change", args=["nightly"])
        response = _client(superuser).get(detail)
        page = response.content.decode()
        assert response.status_code == 200
        assert "Waiting (1), longest first" in page and "second run" in page
        # three holds released, the fourth held now; a few ms apart: drawn as one bar
        assert 'aria-label="Timeline: 4 holds by 1 holder"' in page
        assert len(re.findall(r'<rect class="hold', page)) == 1
        assert "4 holds drawn as one" in page
        events = [r["event"].event for r in response.context["recent"]]
        assert events == ["contended", "acquired", *["released", "acquired"] * 3]
        holder.release()
    finally:
        history.disable()


def test_a_locks_page_says_nothing_of_history_when_it_is_off(real_backend: Any) -> None:
    superuser = User.objects.create_superuser("root", "root@example.com", "pw")
    with Lock("unrecorded", ttl=30):
        response = _client(superuser).get(
            reverse("admin:django_redislock_heldlock_change", args=["unrecorded"])
        )
    assert response.status_code == 200 and "The last hour" not in response.content.decode()
