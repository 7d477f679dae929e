"""docs/architecture.md's "Adding a lock kind" is enough: a kind defined only in the tests
(the pair, ``tests/support/pair_kind.py``) runs on the engine and shows up in
``held_locks()``, ``lock_info()``, ``redislock list --json``, the admin, and can be
force-released (all holders, or one), with no change to any of them."""

from __future__ import annotations

import json
import threading
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.urls import reverse

from django_redislock import (
    Lock,
    LockConfigurationError,
    force_release,
    held_locks,
    lock_info,
    registry,
)
from django_redislock.inspection import RELEASED, force_release_holder
from tests.support import pair_kind
from tests.support.pair_kind import PairLock


@pytest.fixture
def pair(monkeypatch: pytest.MonkeyPatch) -> registry.Kind:
    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))
    return registry.register(pair_kind.KIND)


pytestmark = pytest.mark.usefixtures("pair")


def test_two_hold_a_third_waits_for_a_release(lock_backend: Any) -> None:
    first, second, third = (PairLock("duo", ttl=10, purpose=f"p{i}") for i in range(3))
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    assert second.fence == first.fence + 1
    assert not third.acquire(blocking=False)
    got: list[bool] = []
    waiter = threading.Thread(target=lambda: got.append(third.acquire(timeout=10)))
    waiter.start()
    first.release()  # publishes on the release channel: the waiter is woken, not polling
    waiter.join(10)
    assert got == [True] and third.fence == second.fence + 1
    second.extend(5)
    second.release()
    third.release()
    assert lock_info("duo") is None
    assert lock_backend.client().keys("redislock:{duo}*") == [b"redislock:{duo}:fence"]


def test_inspection_lists_every_holder(lock_backend: Any) -> None:
    first, second = PairLock("duo", ttl=10, purpose="one"), PairLock("duo", ttl=20, purpose="two")
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    with Lock("solo", ttl=10):
        infos = {info.name: info for info in held_locks()}
    assert set(infos) == {"duo", "solo"} and infos["solo"].kind == "lock"
    info = infos["duo"]
    assert (info.kind, info.limit, len(info.holders)) == ("pair", 2, 2)
    assert [h.token for h in info.holders] == [first.token, second.token]  # longest-held first
    assert [h.purpose for h in info.holders] == ["one", "two"]
    assert [h.fence for h in info.holders] == [first.fence, second.fence]
    assert 19 < info.holders[1].ttl <= 20
    assert info.token == first.token and info.purpose == "one"  # the first holder's fields
    read = lock_info("duo")
    assert read is not None and [h.token for h in read.holders] == [first.token, second.token]


def test_force_release_one_holder_or_all(lock_backend: Any) -> None:
    first, second = PairLock("duo", ttl=10), PairLock("duo", ttl=10)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    result = force_release_holder("duo", token=first.token)
    assert result.status == RELEASED and [h.token for h in result.info.holders] == [first.token]
    assert [h.token for h in lock_info("duo").holders] == [second.token]
    assert force_release_holder("duo", token=first.token).status == "changed_hands"
    third = PairLock("duo", ttl=10)
    assert third.acquire(blocking=False)
    assert force_release("duo") is True
    assert lock_info("duo") is None


def test_the_command_lists_and_releases_one_holder(lock_backend: Any) -> None:
    first, second = PairLock("duo", ttl=10, purpose="one"), PairLock("duo", ttl=10)
    assert first.acquire(blocking=False) and second.acquire(blocking=False)

    def run(*args: str) -> str:
        out = StringIO()
        call_command("redislock", *args, stdout=out)
        return out.getvalue()

    [entry] = json.loads(run("list", "--json"))
    assert (entry["kind"], entry["limit"], len(entry["holders"])) == ("pair", 2, 2)
    assert [h["token_prefix"] for h in entry["holders"]] == [first.token[:6], second.token[:6]]
    table = run("list")
    assert table.count("duo   pair  2 of 2") == 2 and "1 held lock on" in table
    assert "Holder 2:" in run("inspect", "duo")
    run("release", "duo", "--yes", f"--token={second.token[:8]}")
    assert [h.token for h in lock_info("duo").holders] == [first.token]
    run("release", "duo", "--yes")
    assert lock_info("duo") is None


def test_the_admin_shows_each_holder_and_releases_one(admin_client: Any) -> None:
    first, second = PairLock("duo", ttl=10, purpose="one"), PairLock("duo", ttl=10, purpose="two")
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    base = "admin:django_redislock_heldlock"
    html = admin_client.get(reverse(f"{base}_changelist")).content.decode()
    assert '<td class="field-kind">pair</td>' in html and "2 of 2" in html and "and 1 more" in html
    detail = admin_client.get(reverse(f"{base}_change", args=["duo"])).content.decode()
    assert ">Holder 1 of 2</h2>" in detail and ">Holder 2 of 2</h2>" in detail
    assert detail.count("Force-release this holder") == 2
    assert first.token not in detail and second.token not in detail
    release = reverse(f"{base}_release", args=["duo"])
    page = admin_client.get(release, {"holder": second.token[:6]}).content.decode()
    assert ">Holder 2 of 2</h2>" in page and ">Holder 1 of 2</h2>" not in page
    assert f'name="token" value="{second.token}"' in page and first.token not in page
    admin_client.post(release, {"token": second.token, "post": "yes"})
    assert [h.token for h in lock_info("duo").holders] == [first.token]


def test_a_pair_and_a_semaphore_on_one_name(lock_backend: Any) -> None:
    from django_redislock import Semaphore

    pair_first = pytest.raises(LockConfigurationError, match=r"by a pair; .* as a semaphore")
    with PairLock("shared", ttl=10), pair_first:
        Semaphore("shared", 2, ttl=5).acquire(blocking=False)
    semaphore_first = pytest.raises(LockConfigurationError, match=r"by a semaphore; .* as a pair")
    with Semaphore("shared", 2, ttl=10), semaphore_first:
        PairLock("shared", ttl=5).acquire(blocking=False)


def test_a_pair_and_a_lock_on_one_name(lock_backend: Any) -> None:
    pair_first = pytest.raises(LockConfigurationError, match=r"in use by a pair; .* as a lock")
    with PairLock("shared", ttl=10), pair_first:
        Lock("shared", ttl=5).acquire(blocking=False)
    lock_first = pytest.raises(LockConfigurationError, match=r"in use by a lock; .* as a pair")
    with Lock("shared", ttl=10), lock_first:
        PairLock("shared", ttl=5).acquire(blocking=False)


def test_the_decorators_build_a_registered_kind(lock_backend: Any) -> None:
    from django_redislock import locked

    inside: list[Any] = []

    @locked("duo", kind="pair", ttl=10)
    def export() -> None:
        info = lock_info("duo")
        inside.append(info and (info.kind, info.holders[0].purpose))

    export()
    assert inside == [
        ("pair", f"{__name__}.test_the_decorators_build_a_registered_kind.<locals>.export")
    ]
    with pytest.raises(TypeError, match=r"Unknown lock option\(s\) limit for PairLock"):
        locked("duo", kind="pair", limit=3)
