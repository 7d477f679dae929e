"""The registry of kinds: factory (decorators, commands, Celery) and inspection look kinds
up there instead of naming classes (engine step 2, DESIGN §8)."""

from __future__ import annotations

from typing import Any

import pytest

from django_redislock import Lock, Redlock, lock_info, registry
from django_redislock.factory import lock_class, make_lock
from django_redislock.kinds import Mutex


class NamedLock(Lock):
    """A lock class registered under a kind of its own by the tests."""


@pytest.fixture
def scratch_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_kinds", dict(registry._kinds))


def test_the_mutex_kind_runs_over_both_backends() -> None:
    mutex = registry.kind("lock")
    assert mutex.backends == ("redis", "redlock")
    assert mutex.lock_class() is Lock and mutex.lock_class("redis") is Lock
    assert mutex.lock_class("redlock") is Redlock
    assert lock_class() is Lock and lock_class(connections=["a", "b", "c"]) is Redlock
    kinds = [kind.name for kind in registry.kinds()]
    assert kinds == ["lock", "semaphore", "election", "read", "write"]


def test_unknown_names_are_refused_with_what_is_known() -> None:
    known = r"Unknown lock kind 'gate'; known kinds: election, lock, read, sem"
    with pytest.raises(ValueError, match=known):
        registry.kind("gate")
    with pytest.raises(ValueError, match=r"backend must be one of redis, redlock for a lock"):
        registry.kind().lock_class("zookeeper")
    with pytest.raises(ValueError, match=r"backend must be one of redis, redlock, not 'x'"):
        lock_class("x")


@pytest.mark.usefixtures("scratch_kinds")
def test_a_registered_kind_is_what_the_factory_builds(lock_backend: Any) -> None:
    registry.register(
        registry.Kind("named", operations=Mutex, classes={"redis": f"{__name__}.NamedLock"})
    )
    assert lock_class(kind="named") is NamedLock
    lock = make_lock("via-registry")  # the default kind is still the mutex
    assert type(lock) is Lock
    with pytest.raises(ValueError, match=r"Unknown backend\(s\) \['pigeon'\]"):
        registry.register(registry.Kind("odd", operations=Mutex, classes={"pigeon": "x.Y"}))


@pytest.mark.usefixtures("scratch_kinds")
def test_inspection_reads_holders_with_the_registered_operations(lock_backend: Any) -> None:
    reads = []

    class CountingMutex(Mutex):
        def read_holders(self) -> Any:
            reads.append(self.keys.name)
            return super().read_holders()

    registry.register(registry.Kind("lock", operations=CountingMutex, classes={"redis": "x"}))
    with Lock("looked-up", ttl=5, purpose="registry") as held:
        info = lock_info("looked-up")
        assert info is not None and info.token == held.token and info.purpose == "registry"
    assert reads == ["looked-up"]
