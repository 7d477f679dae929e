"""A name in use by one kind of lock and asked for as another: ``LockConfigurationError``
naming both kinds, never a raw ``WRONGTYPE`` from Redis (DESIGN §8).

Each kind keeps its main key ``P:{N}`` in a Redis type of its own; here another kind is a
list at the lock's key, registered as a scratch kind (the semaphore, a real kind, meets the
lock in ``test_semaphore.py``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from django_redislock import Lock, LockConfigurationError, registry
from django_redislock.kinds import Mutex
from tests.test_redlock import cluster, settled  # noqa: F401 - the fixture


@pytest.fixture
def list_kind(monkeypatch: pytest.MonkeyPatch) -> registry.Kind:
    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))
    return registry.register(
        registry.Kind("listed-thing", operations=Mutex, classes={}, redis_type="list")
    )


def _held_by_other_kind(backend: Any, name: str) -> None:
    backend.client().rpush(f"redislock:{{{name}}}", "someone")


NAMED = r"Lock name 'shared' is in use by a listed-thing; it was asked for as a lock"


@pytest.mark.usefixtures("list_kind")
@pytest.mark.parametrize("blocking", [False, True])
def test_acquire_names_both_kinds(lock_backend: Any, blocking: bool) -> None:
    _held_by_other_kind(lock_backend, "shared")
    lock = Lock("shared", ttl=5)
    with pytest.raises(LockConfigurationError, match=NAMED) as caught:
        lock.acquire(blocking=blocking, timeout=1)
    assert "WRONGTYPE" not in str(caught.value)
    assert caught.value.lock_name == "shared" and lock.token is None
    with pytest.raises(LockConfigurationError, match=NAMED):
        asyncio.run(lock.aacquire(blocking=blocking, timeout=1))


@pytest.mark.usefixtures("list_kind")
def test_a_holder_whose_name_was_taken_by_another_kind(lock_backend: Any) -> None:
    lock = Lock("shared", ttl=5)
    assert lock.acquire(blocking=False)
    lock_backend.client().delete("redislock:{shared}")
    _held_by_other_kind(lock_backend, "shared")
    for query in (lock.owned, lambda: asyncio.run(lock.aowned())):
        with pytest.raises(LockConfigurationError, match=NAMED):
            query()
    with pytest.raises(LockConfigurationError, match=NAMED):
        lock.extend()
    with pytest.raises(LockConfigurationError, match=NAMED):
        lock.release()


def test_a_type_no_kind_keeps_is_named_by_its_type(lock_backend: Any) -> None:
    _held_by_other_kind(lock_backend, "shared")
    with pytest.raises(LockConfigurationError, match=r"in use by something else .*Redis list"):
        Lock("shared", ttl=5).acquire(blocking=False)


@pytest.mark.usefixtures("list_kind")
def test_redlock_names_both_kinds(request: pytest.FixtureRequest) -> None:
    from django_redislock import Redlock

    c = request.getfixturevalue("cluster")(3)
    for client in c.clients:
        client.rpush("redislock:{shared}", "someone")
    lock = Redlock("shared", ttl=5)
    with pytest.raises(LockConfigurationError, match=NAMED):
        lock.acquire(blocking=False)
    with pytest.raises(LockConfigurationError, match=NAMED):
        asyncio.run(lock.aacquire(blocking=False))


def test_redlock_and_semaphore_on_one_name(request: pytest.FixtureRequest) -> None:
    from django_redislock import Redlock, Semaphore

    c = request.getfixturevalue("cluster")(3)
    permits = [Semaphore("shared", 2, connection=alias, ttl=10) for alias in c.aliases]
    assert all(p.acquire(blocking=False) for p in permits)
    with pytest.raises(LockConfigurationError, match=r"in use by a semaphore; .* as a lock"):
        Redlock("shared", ttl=5).acquire(blocking=False)
    for permit in permits:
        permit.release()
    lock_first = pytest.raises(LockConfigurationError, match=r"in use by a lock; .* a semaphore")
    with Redlock("shared", ttl=10) as lock, lock_first:
        assert settled(lock)  # written on every node, not only on the majority that answered
        Semaphore("shared", 2, connection=c.aliases[0]).acquire(blocking=False)
