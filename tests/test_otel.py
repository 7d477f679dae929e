"""django_redislock.contrib.otel, recorded with the SDK's in-memory exporter: span names,
attributes, events, parent and child, and the link from a waiter's acquire span to the
span of the holder that kept it waiting, within a process and across two."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from django_redislock import Lock, LockNotOwned, Semaphore, events, force_release, holder
from django_redislock.contrib import otel
from django_redislock.events import LockEvent
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent
_exporter = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def provider() -> None:
    sdk = TracerProvider()
    sdk.add_span_processor(SimpleSpanProcessor(_exporter))
    trace.set_tracer_provider(sdk)  # once per process: nothing else in the suite sets one


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    was_on = otel.enabled()
    otel.enable()
    _exporter.clear()
    yield _exporter
    if not was_on:
        otel.disable()


def named(exporter: InMemorySpanExporter, name: str, lock: str) -> list[ReadableSpan]:
    return [
        s
        for s in exporter.get_finished_spans()
        if s.name == name and (s.attributes or {}).get("redislock.name") == lock
    ]


def the(exporter: InMemorySpanExporter, name: str, lock: str, result: str | None = None) -> Any:
    found = [
        s
        for s in named(exporter, name, lock)
        if result is None or (s.attributes or {}).get("redislock.result") == result
    ]
    assert len(found) == 1, [(s.name, s.attributes) for s in found]
    return found[0]


tracer = trace.get_tracer("tests")


def test_an_uncontended_cycle_is_an_acquire_span_and_a_hold_span(
    spans: InMemorySpanExporter,
) -> None:
    with tracer.start_as_current_span("request") as request, Lock("ot-plain:1", ttl=5):
        pass
    acquire = the(spans, "redislock.acquire", "ot-plain:1")
    hold = the(spans, "redislock.hold", "ot-plain:1")
    assert acquire.kind == SpanKind.INTERNAL
    assert acquire.parent.span_id == request.get_span_context().span_id
    assert hold.parent.span_id == request.get_span_context().span_id
    assert dict(acquire.attributes) == {
        "redislock.name": "ot-plain:1",
        "redislock.kind": "lock",
        "redislock.family": "ot-plain",
        "redislock.result": "acquired",
        "redislock.waited_ms": acquire.attributes["redislock.waited_ms"],
        "redislock.fence": hold.attributes["redislock.fence"],
        "redislock.attempts": 1,
    }
    assert acquire.attributes["redislock.waited_ms"] >= 0
    assert acquire.events == () and acquire.links == ()
    assert acquire.end_time <= hold.start_time <= hold.end_time
    assert hold.status.status_code == StatusCode.UNSET


def test_a_waiter_links_to_the_holders_span_and_names_the_holder(
    spans: InMemorySpanExporter,
) -> None:
    held, release = threading.Event(), threading.Event()
    holder_context: list[trace.SpanContext] = []

    def hold() -> None:
        with tracer.start_as_current_span("holder-job") as job:
            holder_context.append(job.get_span_context())
            with Lock("ot-wait", ttl=5):
                held.set()
                release.wait(30)

    thread = threading.Thread(target=hold, name="holder-thread")
    thread.start()
    assert held.wait(30)
    contended = threading.Event()

    def on(event: LockEvent) -> None:
        if event.type == events.CONTENDED and event.name == "ot-wait":
            contended.set()

    events.subscribe(on)
    try:
        timer = threading.Thread(target=lambda: contended.wait(30) and release.set())
        timer.start()
        with tracer.start_as_current_span("waiter-request") as request:
            assert Lock("ot-wait", ttl=5).acquire(timeout=30)
        timer.join(30)
        thread.join(30)
    finally:
        events.unsubscribe(on)
    (waited,) = [
        s
        for s in named(spans, "redislock.acquire", "ot-wait")
        if s.parent and s.parent.span_id == request.get_span_context().span_id
    ]
    (link,) = [link for link in waited.links if link.context.span_id == holder_context[0].span_id]
    assert link.context.trace_id == holder_context[0].trace_id
    (event,) = waited.events
    assert event.name == "contended"
    assert "holder-thread" in event.attributes["redislock.holder"]
    assert str(os.getpid()) in event.attributes["redislock.holder"]
    assert waited.attributes["redislock.attempts"] >= 2
    assert event.timestamp >= waited.start_time


def test_timeout_busy_and_a_loss_are_on_their_spans(spans: InMemorySpanExporter) -> None:
    holder_lock = Lock("ot-outcomes", ttl=5)
    assert holder_lock.acquire()
    assert not Lock("ot-outcomes", ttl=5).acquire(timeout=0.05)
    assert not Lock("ot-outcomes", ttl=5).acquire(blocking=False)
    holder_lock.release()
    timed_out = the(spans, "redislock.acquire", "ot-outcomes", "timeout")
    assert timed_out.attributes["redislock.waited_ms"] >= 50
    assert [e.name for e in timed_out.events] == ["contended"]
    busy = the(spans, "redislock.acquire", "ot-outcomes", "busy")
    assert busy.events == () and busy.attributes["redislock.attempts"] == 1
    watched = Lock("ot-lost", ttl=1, watchdog=True)
    assert watched.acquire()
    force_release("ot-lost")
    assert wait_until(lambda: watched.lost)
    with pytest.raises(LockNotOwned):
        watched.release()
    hold = the(spans, "redislock.hold", "ot-lost")
    assert [e.name for e in hold.events] == ["lost"]
    assert hold.status.status_code == StatusCode.ERROR


def test_async_spans_have_the_tasks_span_as_parent(spans: InMemorySpanExporter) -> None:
    async def main() -> int:
        with tracer.start_as_current_span("task") as task:
            async with Lock("ot-async", ttl=5):
                pass
            return task.get_span_context().span_id

    task_span = asyncio.run(main())
    assert the(spans, "redislock.acquire", "ot-async").parent.span_id == task_span
    assert the(spans, "redislock.hold", "ot-async").parent.span_id == task_span


def test_a_shared_kind_is_traced_as_itself(spans: InMemorySpanExporter) -> None:
    with Semaphore("ot-sem", 2, ttl=5):
        pass
    assert the(spans, "redislock.acquire", "ot-sem").attributes["redislock.kind"] == "semaphore"
    assert the(spans, "redislock.hold", "ot-sem").attributes["redislock.kind"] == "semaphore"


def test_off_no_span_and_no_trace_in_the_holder_description() -> None:
    was_on = otel.enabled()
    otel.disable()
    try:
        _exporter.clear()
        assert holder.trace_field is None
        with tracer.start_as_current_span("request"), Lock("ot-off", ttl=5):
            pass
        assert named(_exporter, "redislock.acquire", "ot-off") == []
        assert "trace" not in holder.parse_holder(holder.holder_description(None, False, 1))
    finally:
        if was_on:
            otel.enable()


@pytest.mark.slow
def test_the_link_crosses_processes(spans: InMemorySpanExporter) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.traced_holder", "ot-processes"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        line = proc.stdout.readline()
        assert line.startswith("held "), line + (proc.stderr.read() if proc.stderr else "")
        _, trace_id, span_id = line.split()
        contended = threading.Event()

        def on(event: LockEvent) -> None:
            if event.type == events.CONTENDED and event.name == "ot-processes":
                contended.set()
                proc.stdin.write("release\n")
                proc.stdin.flush()

        events.subscribe(on)
        try:
            with tracer.start_as_current_span("waiter"):
                assert Lock("ot-processes", ttl=5).acquire(timeout=30)
        finally:
            events.unsubscribe(on)
        assert contended.is_set()
        assert proc.stdout.readline().strip() == "released"
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    waited = the(spans, "redislock.acquire", "ot-processes", "acquired")
    assert [(f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") for link in
            waited.links] == [(trace_id, span_id)]  # fmt: skip


def test_tracing_on_without_the_api_is_a_no_op_that_says_so() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None;"
        "import django; from django.conf import settings;"
        "settings.REDISLOCK = {**settings.REDISLOCK, 'TRACING': True};"
        "django.setup();"
        "from django_redislock import Lock;"
        "lock = Lock('ot-no-api', ttl=1); lock.acquire(); lock.release(); print('ok')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    assert "pip install 'django-redislock[otel]'" in done.stderr


def test_the_docs_settings_switch_tracing_on() -> None:
    from tests.support.docs_examples import run_example

    assert run_example("docs/observability.md", "tracing-settings")["REDISLOCK"] == {
        "TRACING": True
    }
