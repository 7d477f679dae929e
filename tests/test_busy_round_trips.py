"""A refused acquire names its holder in the same reply: the busy paths (an ``on_busy``
handler of ``lock_view``, sync and async; ``lock_command``'s message; a queued Celery
marker) make exactly one round trip, counted by the server (``INFO commandstats``)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.http import HttpResponse
from django.test import RequestFactory

from django_redislock import Lock, lock_view

# A read of the holder after the refusal would show up as one of these (the pipelined
# GET/PTTL/HGETALL of lock_info, or a second script call).
SECOND_LOOK = ("cmdstat_hgetall", "cmdstat_eval")


def hold(name: str, purpose: str = "nightly report") -> Lock:
    lock = Lock(name, ttl=5, purpose=purpose)
    assert lock.acquire(blocking=False)
    return lock


def round_trips(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {
        name: stats[name]["calls"] for name in ("cmdstat_evalsha", *SECOND_LOOK) if name in stats
    }


def assert_one_script_call(client: Any) -> None:
    assert round_trips(client) == {"cmdstat_evalsha": 1}


def test_on_busy_handler_gets_the_holder_in_one_round_trip(real_backend: Any) -> None:
    holder = hold("busy:sync", purpose="sync holder")
    seen = []

    @lock_view("busy:{slug}", on_busy=lambda request, info: seen.append(info) or HttpResponse())
    def view(request: Any, slug: str) -> HttpResponse:
        raise AssertionError("not reached")

    client = real_backend.client()
    client.config_resetstat()
    view(RequestFactory().get("/"), slug="sync")
    assert_one_script_call(client)
    assert [info.token for info in seen] == [holder.token]
    assert seen[0].purpose == "sync holder" and seen[0].fence == holder.fence
    holder.release()


async def test_async_on_busy_handler_gets_the_holder_in_one_round_trip(real_backend: Any) -> None:
    holder = hold("busy:async", purpose="async holder")
    seen = []

    async def on_busy(request: Any, info: Any) -> HttpResponse:
        seen.append(info)
        return HttpResponse()

    @lock_view("busy:{slug}", on_busy=on_busy)
    async def view(request: Any, slug: str) -> HttpResponse:
        raise AssertionError("not reached")

    client = real_backend.client()
    client.config_resetstat()
    await view(RequestFactory().get("/"), slug="async")
    assert_one_script_call(client)
    assert [info.purpose for info in seen] == ["async holder"]
    holder.release()


@pytest.mark.usefixtures("testapp")
def test_lock_command_names_the_holder_in_one_round_trip(real_backend: Any) -> None:
    holder = hold("locked_report", purpose="the nightly run")
    client = real_backend.client()
    client.config_resetstat()
    with pytest.raises(CommandError, match="the nightly run"):
        call_command("locked_report", stdout=StringIO(), stderr=StringIO())
    assert_one_script_call(client)
    holder.release()


def test_a_queued_marker_reads_the_queued_task_from_the_refusal(real_backend: Any) -> None:
    pytest.importorskip("celery")
    from django_redislock.contrib.celery import queued
    from django_redislock.contrib.celery.options import parse

    options = parse("tasks.report", lambda: None, {"name": "q", "scope": "queued"})
    marker, existing = queued.take_marker("tasks.report", "queued:q", "first-id", options)
    assert marker is not None and existing is None
    client = real_backend.client()
    client.config_resetstat()
    again, existing = queued.take_marker("tasks.report", "queued:q", "second-id", options)
    assert again is None and existing == "first-id"
    assert_one_script_call(client)
    marker.release()


@pytest.fixture
def testapp(settings: Any) -> None:
    settings.INSTALLED_APPS = [*settings.INSTALLED_APPS, "tests.support.testapp"]
