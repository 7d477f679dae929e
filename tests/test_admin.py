"""The admin page of held locks, through Django's test client (DESIGN §2, issue 5)."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django_redis import get_redis_connection

from django_redislock import Lock, lock_info
from django_redislock.models import HeldLock
from django_redislock.signals import lock_force_released
from tests.test_inspect import add_junk, hold_raw

pytestmark = pytest.mark.django_db

CHANGELIST = "admin:django_redislock_heldlock_changelist"
DETAIL = "admin:django_redislock_heldlock_change"
RELEASE = "admin:django_redislock_heldlock_release"
RELEASE_SELECTED = "admin:django_redislock_heldlock_release_selected"


def _staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="django_redislock", codename=codename)
        )
    return user


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def viewer() -> User:
    return _staff("viewer", "view_heldlock")


@pytest.fixture
def releaser() -> User:
    return _staff("releaser", "view_heldlock", "release_heldlock")


@pytest.fixture
def nobody() -> User:
    return _staff("nobody")


def _client(user: User, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    client.force_login(user)
    return client


def _detail(name: str) -> str:
    return reverse(DETAIL, args=[quote(name)])


def _release(name: str) -> str:
    return reverse(RELEASE, args=[quote(name)])


def _messages(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def _csrf(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.content.decode())
    assert match, "the page has no CSRF token"
    return match.group(1)


# -- model, migration, permissions -------------------------------------------


def test_model_has_no_table_and_dumpdata_works(superuser):
    from django.db import connection

    assert HeldLock._meta.managed is False
    assert "django_redislock_heldlock" not in connection.introspection.table_names()
    codenames = set(
        Permission.objects.filter(content_type__app_label="django_redislock").values_list(
            "codename", flat=True
        )
    )
    assert codenames == {"view_heldlock", "release_heldlock"}
    assert list(HeldLock.objects.all()) == []
    from io import StringIO

    for args in [(), ("django_redislock",), ("django_redislock.HeldLock", "--all")]:
        out = StringIO()
        call_command("dumpdata", *args, stdout=out)
        assert "django_redislock.heldlock" not in out.getvalue()


def test_makemigrations_is_clean():
    call_command("makemigrations", "django_redislock", "--check", "--dry-run", verbosity=0)


def test_admin_index_entry(superuser, viewer, nobody):
    page = _client(superuser).get(reverse("admin:index")).content.decode()
    assert "Held locks" in page and reverse(CHANGELIST) in page
    assert "Held locks" in _client(viewer).get(reverse("admin:index")).content.decode()
    assert "Held locks" not in _client(nobody).get(reverse("admin:index")).content.decode()


def test_every_view_checks_the_model_permission(viewer, nobody):
    Lock("busy", ttl=30).acquire()
    for user, view_status, release_status in [(nobody, 403, 403), (viewer, 200, 403)]:
        client = _client(user)
        assert client.get(reverse(CHANGELIST)).status_code == view_status
        assert client.get(_detail("busy")).status_code == view_status
        assert client.get(_release("busy")).status_code == release_status
        token = lock_info("busy").token
        assert client.post(_release("busy"), {"token": token}).status_code == release_status
        assert (
            client.post(reverse(RELEASE_SELECTED), {"lock": "busy", "token": token}).status_code
            == release_status
        )
        assert (
            client.post(
                reverse(CHANGELIST),
                {"action": "release_selected", "_selected_action": ["busy"]},
            ).status_code
            == release_status
        )
    assert lock_info("busy") is not None
    # Not staff at all: the admin's login page.
    anonymous = Client().get(reverse(CHANGELIST))
    assert anonymous.status_code == 302 and "/login/" in anonymous.url


# -- listing --------------------------------------------------------------------


def test_changelist_shows_held_locks_live(superuser):
    add_junk(get_redis_connection("default"), 200)
    with Lock("report:daily", ttl=30, purpose="nightly report") as lock:
        Lock("invoice:42", ttl=5, watchdog=False).acquire()
        page = _client(superuser).get(reverse(CHANGELIST))
        assert page.status_code == 200
        html = page.content.decode()
        assert "report:daily" in html and "invoice:42" in html and "nightly report" in html
        assert "ghost" not in html  # a companion key without its lock is not a lock
        assert f"pid {os.getpid()}" in html
        rows = page.context["rows"]
        assert [r["info"].name for r in rows] == ["invoice:42", "report:daily"]  # by name
        assert lock.token not in html  # tokens never appear in the list
        assert _detail("report:daily") in html
        assert 'class="action-select"' in html  # the superuser may release
        assert "breadcrumbs" in html and "admin/css/changelists.css" in html
        assert '<td class="field-kind">lock</td>' in html
        assert html.count('<td class="field-holders heldlock-num">1</td>') == 2


def test_changelist_for_a_viewer_has_no_release_controls_nor_tokens(viewer):
    lock = Lock("report", ttl=30)
    lock.acquire()
    client = _client(viewer)
    html = client.get(reverse(CHANGELIST)).content.decode()
    assert "report" in html and "action-select" not in html and lock.token not in html
    detail = client.get(_detail("report")).content.decode()
    assert lock.token[:6] in detail and lock.token not in detail
    assert "Force-release" not in detail
    assert ">Lock</h2>" in detail and ">Holder</h2>" in detail and ">lock</div>" in detail


def test_search_and_sort(superuser):
    raw = get_redis_connection("default")
    hold_raw(raw, ["report:1", "report:2", "invoice:1", "a*b"], ttl_ms=60_000)
    hold_raw(raw, ["report:3"], ttl_ms=10_000)
    client = _client(superuser)

    def names(**params: Any) -> list[str]:
        response = client.get(reverse(CHANGELIST), params)
        assert response.status_code == 200
        return [r["info"].name for r in response.context["rows"]]

    assert names(q="report") == ["report:1", "report:2", "report:3"]
    assert names(q="report:*", o="-name") == ["report:3", "report:2", "report:1"]
    assert names(q="report", o="ttl")[0] == "report:3"
    assert names(q="report", o="-ttl")[-1] == "report:3"
    assert names(q="a*b") == ["a*b"]  # a glob: "a", anything, "b"
    assert names(q="nothing") == []
    empty = client.get(reverse(CHANGELIST), {"q": "nothing"})
    assert "No held lock matches" in empty.content.decode()
    assert client.get(reverse(CHANGELIST), {"o": "bogus"}).status_code == 200
    bad = client.get(reverse(CHANGELIST), {"cursor": "x-y-z"})
    assert bad.status_code == 200 and "cursor" in bad.context["error"]
    assert client.get(reverse(CHANGELIST), {"connection": "nope"}).status_code == 404


def test_paging_through_more_than_a_thousand_locks(superuser):
    raw = get_redis_connection("default")
    add_junk(raw, 2_000)
    names = {f"job:{i:05d}" for i in range(1_234)}
    hold_raw(raw, sorted(names))
    client = _client(superuser)
    seen: list[str] = []
    url: str | None = reverse(CHANGELIST)
    pages = 0
    while url:
        response = client.get(url)
        assert response.status_code == 200
        pages += 1
        rows = response.context["rows"]
        seen.extend(r["info"].name for r in rows)
        assert len(rows) < 400
        next_url = response.context["next_url"]
        url = reverse(CHANGELIST) + next_url if next_url else None
        if url:
            assert "Next page" in response.content.decode()
    assert pages >= 10
    assert set(seen) == names  # every lock held throughout is listed (SCAN guarantee)
    assert "end of the list" in response.content.decode()


def test_redis_down_shows_an_error_not_a_500(superuser, real_backend):
    real_backend.server.stop()
    response = _client(superuser).get(reverse(CHANGELIST))
    assert response.status_code == 200
    assert "unavailable" in response.context["error"]


# -- detail --------------------------------------------------------------------


def test_detail_page(superuser):
    name = "path/with spaces_and:odd?chars"
    with Lock(name, ttl=30, purpose="import") as lock:
        response = _client(superuser).get(_detail(name))
        assert response.status_code == 200
        html = response.content.decode()
        assert "import" in html and lock.token[:6] in html and lock.token not in html
        assert _release(name) in html
        assert response.context["info"].fence == lock.fence
    gone = _client(superuser).get(_detail(name), follow=True)
    assert "is not held" in " ".join(_messages(gone))
    assert _client(superuser).get(reverse(DETAIL, args=["a{b}"])).status_code == 404


# -- force-release -------------------------------------------------------------


def test_release_flow_with_csrf_writes_log_and_signal(superuser):
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    lock_force_released.connect(receiver)
    try:
        holder = Lock("nightly", ttl=30, purpose="nightly report")
        holder.acquire()
        client = _client(superuser, enforce_csrf_checks=True)
        confirm = client.get(_release("nightly"))
        assert confirm.status_code == 200
        html = confirm.content.decode()
        assert "Are you sure" in html and "nightly report" in html
        assert f'name="token" value="{holder.token}"' in html
        # Without the CSRF token the POST is refused.
        assert client.post(_release("nightly"), {"token": holder.token}).status_code == 403
        assert lock_info("nightly") is not None
        csrf = _csrf(client, _release("nightly"))
        done = client.post(
            _release("nightly"),
            {"token": holder.token, "csrfmiddlewaretoken": csrf, "post": "yes"},
            follow=True,
        )
        assert done.redirect_chain[-1][0] == reverse(CHANGELIST)
        assert "was force-released" in " ".join(_messages(done))
        assert lock_info("nightly") is None
        entry = LogEntry.objects.get()
        assert entry.user == superuser and entry.action_flag == DELETION
        assert entry.object_repr == "nightly" and entry.object_id == "nightly"
        assert entry.content_type == ContentType.objects.get_for_model(HeldLock)
        assert "nightly report" in entry.change_message
        assert holder.token not in entry.change_message
        assert received and received[0]["user"] == superuser
        assert received[0]["info"].token == holder.token
        # The detail page shows the release in its history once the lock is held again.
        Lock("nightly", ttl=30).acquire()
        assert "Force-release history" in client.get(_detail("nightly")).content.decode()
    finally:
        lock_force_released.disconnect(receiver)


def test_release_of_a_lock_that_changed_hands_is_refused(superuser):
    first = Lock("job", ttl=30)
    first.acquire()
    client = _client(superuser)
    html = client.get(_release("job")).content.decode()
    shown = re.search(r'name="token" value="([^"]+)"', html).group(1)
    assert shown == first.token
    # Meanwhile the holder finished and somebody else took the lock.
    first.release()
    second = Lock("job", ttl=30, purpose="second holder")
    second.acquire()
    response = client.post(_release("job"), {"token": shown, "post": "yes"}, follow=True)
    assert "changed hands" in " ".join(_messages(response))
    assert response.redirect_chain[-1][0] == _detail("job")
    assert lock_info("job").token == second.token
    assert not LogEntry.objects.exists()
    # Released and expired in the meantime: nothing to do.
    second.release()
    response = client.post(_release("job"), {"token": shown}, follow=True)
    assert "no longer held" in " ".join(_messages(response))
    # A POST without a token never releases whoever holds it.
    third = Lock("job", ttl=30)
    third.acquire()
    response = client.post(_release("job"), {}, follow=True)
    assert "was not released" in " ".join(_messages(response))
    assert lock_info("job").token == third.token
    # GET on a lock nobody holds.
    third.release()
    response = client.get(_release("job"), follow=True)
    assert "nothing to release" in " ".join(_messages(response))


def test_bulk_release(releaser):
    locks = {name: Lock(name, ttl=30) for name in ["a", "b", "c", "d"]}
    for lock in locks.values():
        lock.acquire()
    client = _client(releaser, enforce_csrf_checks=True)
    csrf = _csrf(client, reverse(CHANGELIST))
    # No selection: a message, nothing released.
    empty = client.post(
        reverse(CHANGELIST),
        {"action": "release_selected", "csrfmiddlewaretoken": csrf},
        follow=True,
    )
    assert "Items must be selected" in " ".join(_messages(empty))
    locks["d"].release()  # gone before the confirmation page
    confirm = client.post(
        reverse(CHANGELIST),
        {
            "action": "release_selected",
            "_selected_action": ["a", "b", "c", "d"],
            "csrfmiddlewaretoken": csrf,
        },
    )
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert "Are you sure" in html and "No longer held" in html
    pairs = re.findall(
        r'name="lock" value="([^"]+)">\s*<input type="hidden" name="token" value="([^"]+)"', html
    )
    assert sorted(name for name, _ in pairs) == ["a", "b", "c"]
    # "b" changes hands before the confirmation is posted.
    locks["b"].release()
    new_b = Lock("b", ttl=30)
    new_b.acquire()
    form = {"lock": [n for n, _ in pairs], "token": [t for _, t in pairs], "post": "yes"}
    done = client.post(
        reverse(RELEASE_SELECTED), {**form, "csrfmiddlewaretoken": csrf}, follow=True
    )
    text = " ".join(_messages(done))
    assert "2 locks were force-released" in text and "“b” changed hands" in text
    assert lock_info("a") is None and lock_info("c") is None
    assert lock_info("b").token == new_b.token
    assert sorted(LogEntry.objects.values_list("object_repr", flat=True)) == ["a", "c"]
    assert client.get(reverse(RELEASE_SELECTED)).status_code == 405


# -- custom AdminSite --------------------------------------------------------


@pytest.mark.urls("tests.support.urls_admin_custom")
def test_works_on_a_custom_admin_site(superuser, viewer):
    holder = Lock("ops-job", ttl=30)
    holder.acquire()
    client = _client(superuser)
    index = client.get(reverse("ops:index")).content.decode()
    assert "Ops console" in index and "Held locks" in index
    page = client.get(reverse("ops:django_redislock_heldlock_changelist"))
    html = page.content.decode()
    assert page.status_code == 200 and "Ops console" in html and "ops-job" in html
    assert 'href="/ops/"' in html  # breadcrumbs lead to this site, not admin.site
    detail_url = reverse("ops:django_redislock_heldlock_change", args=["ops-job"])
    assert detail_url.startswith("/ops/") and detail_url in html
    release_url = reverse("ops:django_redislock_heldlock_release", args=["ops-job"])
    done = client.post(release_url, {"token": holder.token}, follow=True)
    assert done.redirect_chain[-1][0] == "/ops/django_redislock/heldlock/"
    assert lock_info("ops-job") is None
    assert _client(viewer).get(release_url).status_code == 403
