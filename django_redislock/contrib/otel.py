"""OpenTelemetry traces of every acquire and hold, read from the engine's event stream.

Turned on by ``REDISLOCK["TRACING"] = True`` (the app calls :func:`enable` when Django
starts; a no-op with a warning when ``opentelemetry-api`` is not installed) or by calling
:func:`enable`. It needs the API only: spans go wherever the application's
``TracerProvider`` sends them, and nowhere without one.

- ``redislock.acquire`` (INTERNAL), a child of the span current at the call, from the
  call to its outcome: an event ``contended`` at the first refusal naming the holder,
  and a **link to the holder's span**. With tracing on, each holder's description in
  Redis carries the W3C ``traceparent`` of the span current when it acquired (its
  request, its task); the refusal a waiter reads anyway brings it along, so the link
  costs no round trip.
- ``redislock.hold``, from the grant to the release or the loss (event ``lost``, status
  error), a child of the span current at the acquire.

Attributes (a contract, ``docs/observability.md``): ``redislock.name``,
``redislock.kind``, ``redislock.family``, ``redislock.result``, ``redislock.waited_ms``,
``redislock.fence``, ``redislock.attempts``.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import __version__, events, holder
from ..holder import parse_holder

RESULTS = events.ACQUIRE_RESULTS

_propagator = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("django_redislock", __version__)


def current_traceparent() -> str:
    """The current span's context as a ``traceparent`` (``""`` when there is none)."""
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent", "")


def holder_span_context(holder_state: Any) -> trace.SpanContext | None:
    """The span context a refusing holder's description carries, if any."""
    description = getattr(holder_state, "description", None)
    if not description:
        return None
    traceparent = parse_holder(description).get("trace")
    if not traceparent:
        return None
    context = _propagator.extract({"traceparent": traceparent})
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def _holder_text(holder_state: Any) -> str:
    description = getattr(holder_state, "description", None)
    if not description:
        return ""
    fields = parse_holder(description)
    return " ".join(
        part
        for part in (fields.get("host"), f"pid {fields.get('pid', '?')}", fields.get("thread"))
        if part
    ) + (f" ({fields['purpose']})" if fields.get("purpose") else "")


def _attributes(event: events.LockEvent, **more: Any) -> dict[str, Any]:
    attributes = {
        "redislock.name": event.name,
        "redislock.kind": event.kind,
        "redislock.family": event.family,
        **more,
    }
    if event.fence is not None:
        attributes["redislock.fence"] = event.fence
    return {key: value for key, value in attributes.items() if value is not None}


class _Tracer:
    """The consumer: an acquire span per acquire outcome, a hold span per grant."""

    def __init__(self) -> None:
        # A contended acquire's first refusal, until its outcome: (time_ns, holder).
        self._contended: weakref.WeakKeyDictionary[Any, tuple[int, Any]] = (
            weakref.WeakKeyDictionary()
        )
        # The open hold span of each held lock (a lock collected while held takes its
        # span with it: never ended, never exported).
        self._holds: weakref.WeakKeyDictionary[Any, trace.Span] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, event: events.LockEvent) -> None:
        lock = event.lock
        if lock is None:
            return  # force_released: no span of this process to put it on
        type_ = event.type
        if type_ == events.CONTENDED:
            with self._lock:
                self._contended[lock] = (time.time_ns(), event.holder)
        elif type_ in RESULTS:
            self._acquire_span(event, RESULTS[type_])
        elif type_ in (events.RELEASED, events.LOST):
            with self._lock:
                span = self._holds.pop(lock, None)
            if span is not None:
                if type_ == events.LOST:
                    span.add_event("lost", {"reason": event.reason or ""})
                    span.set_status(Status(StatusCode.ERROR, event.reason or "lost"))
                span.end()

    def _acquire_span(self, event: events.LockEvent, result: str) -> None:
        end = time.time_ns()
        waited = event.waited or 0.0
        with self._lock:
            contended = self._contended.pop(event.lock, None)
        links = []
        holders = [contended[1]] if contended else []
        if event.holder is not None and event.type == events.TIMED_OUT:
            holders.append(event.holder)  # the last refusal's holder, if another
        seen = set()
        for holder_state in holders:
            span_context = holder_span_context(holder_state)
            if span_context is not None and span_context.span_id not in seen:
                seen.add(span_context.span_id)
                links.append(Link(span_context, {"redislock.link": "holder"}))
        span = _tracer.start_span(
            "redislock.acquire",
            kind=SpanKind.INTERNAL,
            start_time=end - int(waited * 1e9),
            links=links,
            attributes=_attributes(
                event,
                **{
                    "redislock.result": result,
                    "redislock.waited_ms": round(waited * 1000, 3),
                    "redislock.attempts": event.attempts,
                },
            ),
        )
        if contended is not None:
            span.add_event(
                "contended", {"redislock.holder": _holder_text(contended[1])}, contended[0]
            )
        if event.type == events.FAILED:
            span.set_status(Status(StatusCode.ERROR, event.reason or "unavailable"))
        span.end(end_time=end)
        if event.type == events.ACQUIRED:
            hold = _tracer.start_span(
                "redislock.hold", kind=SpanKind.INTERNAL, start_time=end,
                attributes=_attributes(event),
            )  # fmt: skip
            with self._lock:
                self._holds[event.lock] = hold


_consumer: _Tracer | None = None
_consumer_lock = threading.Lock()


def enable() -> None:
    """Trace every acquire and hold from now on, and carry the span context in the holder
    descriptions this process writes."""
    global _consumer
    with _consumer_lock:
        if _consumer is None:
            _consumer = _Tracer()
        events.subscribe(_consumer)
        holder.trace_field = current_traceparent


def disable() -> None:
    """Stop tracing (spans already open end as they would, untraced)."""
    with _consumer_lock:
        holder.trace_field = None
        if _consumer is not None:
            events.unsubscribe(_consumer)


def enabled() -> bool:
    """True while acquires and holds are traced."""
    return _consumer is not None and events.subscribed(_consumer)


__all__ = ["current_traceparent", "disable", "enable", "enabled", "holder_span_context"]
