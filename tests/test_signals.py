"""A receiver that raises never leaks a lock nor hides one: every signal, sync and async,
``Lock`` and ``Redlock``. The error is logged (``django_redislock.signals``) and the other
receivers still run."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.dispatch import Signal

from django_redislock import Lock, Redlock, force_release, signals
from tests.test_redlock import NT, cluster  # noqa: F401 - the cluster fixture

KINDS = ["lock", "redlock"]


class Receivers:
    """A receiver that raises, connected first, and one that records, connected after it."""

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        self.calls: list[dict[str, Any]] = []
        self.event = threading.Event()

    def failing(self, sender: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"receiver failed for {sender.__name__}")

    def recording(self, sender: Any, **kwargs: Any) -> None:
        kwargs.pop("signal", None)
        self.calls.append(kwargs)
        self.event.set()


@pytest.fixture
def failing_receiver(request: pytest.FixtureRequest) -> Iterator[Receivers]:
    receivers = Receivers(request.param)
    request.param.connect(receivers.failing, weak=False)
    request.param.connect(receivers.recording, weak=False)
    yield receivers
    request.param.disconnect(receivers.failing)
    request.param.disconnect(receivers.recording)


def make_lock(kind: str, request: pytest.FixtureRequest, name: str, **kwargs: Any) -> Any:
    if kind == "lock":
        return Lock(name, **kwargs)
    request.getfixturevalue("cluster")(3)
    return Redlock(name, node_timeout=NT, **kwargs)


def failures_logged(caplog: pytest.LogCaptureFixture, signal_name: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "django_redislock.signals" and signal_name in r.getMessage()
    ]


@pytest.mark.parametrize("failing_receiver", [signals.lock_acquired], indirect=True)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failing_lock_acquired_receiver_leaves_the_caller_holding_the_lock(
    failing_receiver, kind, mode, request, caplog
):
    lock = make_lock(kind, request, f"acq-{kind}-{mode}", ttl=5)
    caplog.set_level(logging.ERROR, logger="django_redislock.signals")
    if mode == "sync":
        with lock:
            assert lock.owned() and failing_receiver.calls == [{"lock": lock}]
        assert not lock.locked()
    else:

        async def main() -> None:
            async with lock:
                assert await lock.aowned() and failing_receiver.calls == [{"lock": lock}]
            assert not await lock.alocked()

        asyncio.run(main())
    assert len(failures_logged(caplog, "lock_acquired")) == 1


@pytest.mark.parametrize("failing_receiver", [signals.lock_released], indirect=True)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_failing_lock_released_receiver_does_not_make_a_release_look_failed(
    failing_receiver, kind, mode, request, caplog
):
    lock = make_lock(kind, request, f"rel-{kind}-{mode}", ttl=5)
    caplog.set_level(logging.ERROR, logger="django_redislock.signals")
    if mode == "sync":
        lock.acquire()
        lock.release()  # does not raise
        assert not lock.locked()
    else:

        async def main() -> None:
            await lock.aacquire()
            await lock.arelease()
            assert not await lock.alocked()

        asyncio.run(main())
    assert failing_receiver.calls == [{"lock": lock}]
    assert len(failures_logged(caplog, "lock_released")) == 1


@pytest.mark.parametrize("failing_receiver", [signals.lock_lost], indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_lock_lost_receiver_does_not_stop_on_lost(
    failing_receiver, kind, request, caplog
):
    lost = threading.Event()
    lock = make_lock(
        kind, request, f"lost-{kind}", ttl=0.6, watchdog=True, on_lost=lambda _: lost.set()
    )
    caplog.set_level(logging.ERROR, logger="django_redislock.signals")
    lock.acquire()
    assert force_release(lock.name) if kind == "lock" else _delete_everywhere(lock)
    assert lost.wait(10) and failing_receiver.event.wait(10)
    assert failing_receiver.calls[0]["lock"] is lock
    assert len(failures_logged(caplog, "lock_lost")) == 1


def _delete_everywhere(lock: Redlock) -> bool:
    from django_redislock.connection import lock_client

    for alias in lock.connections:
        lock_client(alias).delete(lock.key)
    return True


@pytest.mark.parametrize("failing_receiver", [signals.lock_force_released], indirect=True)
def test_a_failing_lock_force_released_receiver_does_not_hide_the_release(failing_receiver, caplog):
    caplog.set_level(logging.ERROR, logger="django_redislock.signals")
    holder = Lock("forced", ttl=5)
    holder.acquire()
    assert force_release("forced") is True
    assert not holder.locked()
    assert failing_receiver.calls[0]["name"] == "forced"
    assert len(failures_logged(caplog, "lock_force_released")) == 1
