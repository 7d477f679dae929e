"""Prometheus metrics for every lock, read from the engine's event stream.

Turned on by ``REDISLOCK["METRICS"] = True`` (the app subscribes :func:`enable` when
Django starts) or by calling :func:`enable`. The metrics live on ``prometheus_client``'s
default registry, so django-prometheus's ``/metrics`` or :func:`metrics_view` serves them
beside everything else. Under a pre-forking server (gunicorn) set
``PROMETHEUS_MULTIPROC_DIR`` as prometheus_client documents: every worker writes its
figures there and :func:`metrics_view` adds them up; the two gauges are summed over the
live workers (``livesum``), so call :func:`mark_process_dead` from gunicorn's
``child_exit``.

Names and labels (``docs/observability.md``) are a contract: dashboards and alerts are
written against them. Labels are the kind, the **family** (a bounded name: never the
lock's own name) and the result; never anything with one value per lock.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from .. import events

if TYPE_CHECKING:
    from django.http import HttpRequest, HttpResponse

try:
    import prometheus_client
except ImportError as exc:  # pragma: no cover - the message is the point
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "REDISLOCK['METRICS'] needs prometheus_client: pip install 'django-redislock[prometheus]'"
    ) from exc

#: Histogram buckets, seconds: a millisecond to five minutes.
BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)  # fmt: skip

#: An acquire's outcome -> its ``result`` label.
RESULTS = events.ACQUIRE_RESULTS

#: Every metric this module exports: name -> (type, labels).
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "redislock_acquisitions_total": ("counter", ("kind", "family", "result")),
    "redislock_wait_seconds": ("histogram", ("kind", "family", "result")),
    "redislock_hold_seconds": ("histogram", ("kind", "family")),
    "redislock_contentions_total": ("counter", ("kind", "family")),
    "redislock_lost_total": ("counter", ("kind", "family")),
    "redislock_force_released_total": ("counter", ("kind", "family")),
    "redislock_renewals_total": ("counter", ("result",)),
    "redislock_held": ("gauge", ("kind",)),
    "redislock_waiting": ("gauge", ("kind",)),
}

_HELP = {
    "redislock_acquisitions_total": "Lock acquire calls, by outcome.",
    "redislock_wait_seconds": "Seconds from an acquire call to its outcome.",
    "redislock_hold_seconds": "Seconds a lock was held, to its release or its loss.",
    "redislock_contentions_total": "Acquires that found the lock held and waited.",
    "redislock_lost_total": "Locks lost while held: expired, taken over or force-released.",
    "redislock_force_released_total": "Locks deleted by force_release.",
    "redislock_renewals_total": "Watchdog renewals, by outcome.",
    "redislock_held": "Locks this process holds now.",
    "redislock_waiting": "Acquires in this process waiting for a held lock now.",
}


class _Metrics:
    """The metric objects, made once per process on the default registry."""

    def __init__(self) -> None:
        def counter(name: str) -> Any:
            # prometheus_client adds "_total" itself: give it the bare name.
            bare = name.removesuffix("_total")
            return prometheus_client.Counter(bare, _HELP[name], METRICS[name][1])

        def histogram(name: str) -> Any:
            return prometheus_client.Histogram(name, _HELP[name], METRICS[name][1], buckets=BUCKETS)

        def gauge(name: str) -> Any:
            return prometheus_client.Gauge(
                name, _HELP[name], METRICS[name][1], multiprocess_mode="livesum"
            )

        self.acquisitions = counter("redislock_acquisitions_total")
        self.wait = histogram("redislock_wait_seconds")
        self.hold = histogram("redislock_hold_seconds")
        self.contentions = counter("redislock_contentions_total")
        self.lost = counter("redislock_lost_total")
        self.force_released = counter("redislock_force_released_total")
        self.renewals = counter("redislock_renewals_total")
        self.held = gauge("redislock_held")
        self.waiting = gauge("redislock_waiting")
        # The acquires counted in ``waiting`` (by id of their lock object): an acquire's
        # outcome leaves the gauge only if its ``contended`` entered it.
        self._waiters: set[int] = set()
        self._waiters_lock = threading.Lock()

        # Each metric's children by label values: ``labels()`` costs a microsecond a call,
        # a dict look-up a twentieth of that. Bounded: families are capped.
        self._children: dict[tuple[Any, ...], Any] = {}

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def __call__(self, event: events.LockEvent) -> None:
        type_ = event.type
        child = self._child
        if type_ == events.RENEWAL:
            child(self.renewals, event.result or "error").inc()
            return
        kind = event.kind
        if type_ == events.CONTENDED:
            child(self.contentions, kind, event.family).inc()
            with self._waiters_lock:
                self._waiters.add(id(event.lock))
            child(self.waiting, kind).inc()
            return
        result = RESULTS.get(type_)
        if result is not None:
            family = event.family
            child(self.acquisitions, kind, family, result).inc()
            child(self.wait, kind, family, result).observe(event.waited or 0.0)
            if self._waiters:  # else no acquire of this process is waiting: no lock taken
                with self._waiters_lock:
                    was_waiting = id(event.lock) in self._waiters
                    self._waiters.discard(id(event.lock))
                if was_waiting:
                    child(self.waiting, kind).dec()
            if type_ == events.ACQUIRED:
                child(self.held, kind).inc()
        elif type_ in (events.RELEASED, events.LOST):
            family = event.family
            child(self.hold, kind, family).observe(event.held or 0.0)
            child(self.held, kind).dec()
            if type_ == events.LOST:
                child(self.lost, kind, family).inc()
        elif type_ == events.FORCE_RELEASED:
            child(self.force_released, kind, event.family).inc()


_metrics: _Metrics | None = None
_metrics_lock = threading.Lock()


def enable() -> None:
    """Count every lock event from now on (the metrics are made on first use)."""
    global _metrics
    with _metrics_lock:
        if _metrics is None:
            _metrics = _Metrics()
        events.subscribe(_metrics)


def disable() -> None:
    """Stop counting (the metrics keep their values, as a counter must)."""
    if _metrics is not None:
        events.unsubscribe(_metrics)


def enabled() -> bool:
    """True while the metrics count events."""
    return _metrics is not None and events.subscribed(_metrics)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The default registry in Prometheus' text format; under ``PROMETHEUS_MULTIPROC_DIR``,
    every worker's figures added up. Mount it where your scraper looks (``/metrics``) and
    keep it off the public internet, as with any metrics endpoint."""
    from django.http import HttpResponse
    from prometheus_client import multiprocess

    registry: Any = prometheus_client.REGISTRY
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = prometheus_client.CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return HttpResponse(
        prometheus_client.generate_latest(registry),
        content_type=prometheus_client.CONTENT_TYPE_LATEST,
    )


def mark_process_dead(pid: int) -> None:
    """Drop a dead worker's gauges (gunicorn: call it from ``child_exit`` with the
    worker's pid); its counters and histograms stay in the sums."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid)


__all__ = [
    "BUCKETS",
    "METRICS",
    "RESULTS",
    "disable",
    "enable",
    "enabled",
    "mark_process_dead",
    "metrics_view",
]
