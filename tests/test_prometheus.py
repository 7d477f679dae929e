"""django_redislock.contrib.prometheus: after a scripted sequence every counter and
histogram count is exactly what it should be, per kind, sync and async; the gauges come
back to where they were; nothing is imported when METRICS is off."""

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
from django_redis import get_redis_connection
from prometheus_client import REGISTRY

from django_redislock import Election, Lock, LockNotOwned, events
from django_redislock.contrib import prometheus
from django_redislock.events import LockEvent
from tests.support.docs_examples import examples, run_example
from tests.support.gunicorn import get, gunicorn
from tests.support.polling import wait_until
from tests.test_event_stream import KINDS, TTL, ascript, script
from tests.test_redlock import cluster  # noqa: F401 (the fixture)

ROOT = Path(__file__).resolve().parent.parent
DOCS = "docs/observability.md"


@pytest.fixture
def metrics() -> Iterator[None]:
    was_on = prometheus.enabled()
    prometheus.enable()
    yield
    if not was_on:
        prometheus.disable()


@pytest.fixture
def renewals() -> Iterator[list[LockEvent]]:
    """The renewals that renewed (their number depends on timing: counted as they come)."""
    seen: list[LockEvent] = []

    def consumer(event: LockEvent) -> None:
        if event.type == events.RENEWAL:
            seen.append(event)

    events.subscribe(consumer)
    yield seen
    events.unsubscribe(consumer)


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def snapshot(kinds: set[str], family: str) -> dict[tuple[Any, ...], float]:
    """Every series of ``family`` for ``kinds``, and the family-less ones."""
    out: dict[tuple[Any, ...], float] = {}
    for kind in kinds:
        for result in prometheus.RESULTS.values():
            out["acq", kind, result] = value(
                "redislock_acquisitions_total", kind=kind, family=family, result=result
            )
            out["wait", kind, result] = value(
                "redislock_wait_seconds_count", kind=kind, family=family, result=result
            )
        for short, metric in (
            ("hold", "redislock_hold_seconds_count"),
            ("contended", "redislock_contentions_total"),
            ("lost", "redislock_lost_total"),
            ("forced", "redislock_force_released_total"),
        ):
            out[short, kind] = value(metric, kind=kind, family=family)
        out["held", kind] = value("redislock_held", kind=kind)
        out["waiting", kind] = value("redislock_waiting", kind=kind)
    for result in ("renewed", "lost", "error"):
        out["renewals", result] = value("redislock_renewals_total", result=result)
    return out


def changes(before: dict[tuple[Any, ...], float], after: dict[tuple[Any, ...], float]) -> dict:
    return {key: after[key] - before[key] for key in after if after[key] != before[key]}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_count_of_every_kind_is_exact(
    metrics: None, renewals: list[LockEvent], kind: str, mode: str
) -> None:
    # The event stream's script: acquired, contended + timed out, busy, released; acquired
    # under the watchdog, force-released, the loss found by the watchdog.
    holder_of, kind_of = KINDS[kind]
    family = f"pm-{kind}-{mode}"
    name = f"{family}:1"
    holder = "write" if kind == "read" else kind
    before = snapshot({holder, kind}, family)
    if mode == "sync":
        script(holder_of, kind_of, name)
    else:
        asyncio.run(ascript(holder_of, kind_of, name))
    renewed = sum(1 for e in renewals if e.result == "renewed" and e.name == name)
    want: dict[tuple[Any, ...], float] = {
        ("acq", holder, "acquired"): 1,
        ("wait", holder, "acquired"): 1,
        ("hold", holder): 1,
        ("acq", kind, "timeout"): 1,
        ("wait", kind, "timeout"): 1,
        ("acq", kind, "busy"): 1,
        ("wait", kind, "busy"): 1,
        ("contended", kind): 1,
        ("acq", kind, "acquired"): 1 + (holder == kind),
        ("wait", kind, "acquired"): 1 + (holder == kind),
        ("hold", kind): 1 + (holder == kind),
        ("forced", kind): 1,
        ("lost", kind): 1,
        ("renewals", "lost"): 1,
    }
    if renewed:
        want["renewals", "renewed"] = renewed
    assert changes(before, snapshot({holder, kind}, family)) == want


def test_an_election_and_a_redlock_are_counted_as_themselves(
    metrics: None,
    cluster: Any,  # noqa: F811 (the fixture)
) -> None:
    from django_redislock import Redlock

    before = snapshot({"election", "redlock"}, "pm-other-kinds")
    leader = Election("pm-other-kinds", ttl=TTL, identity="a")
    assert leader.campaign()
    assert not Election("pm-other-kinds", ttl=TTL, identity="b").campaign(timeout=0.05)
    leader.resign()
    cluster(3)
    with Redlock("pm-other-kinds", ttl=TTL):
        assert not Redlock("pm-other-kinds", ttl=TTL).acquire(blocking=False)
    assert changes(before, snapshot({"election", "redlock"}, "pm-other-kinds")) == {
        ("acq", "election", "acquired"): 1,
        ("wait", "election", "acquired"): 1,
        ("acq", "election", "timeout"): 1,
        ("wait", "election", "timeout"): 1,
        ("contended", "election"): 1,
        ("hold", "election"): 1,
        ("acq", "redlock", "acquired"): 1,
        ("wait", "redlock", "acquired"): 1,
        ("acq", "redlock", "busy"): 1,
        ("wait", "redlock", "busy"): 1,
        ("hold", "redlock"): 1,
    }


def test_a_lock_lost_by_expiry_is_counted_with_how_long_it_was_held(metrics: None) -> None:
    redis = get_redis_connection("default")
    before = snapshot({"lock"}, "pm-expiry")
    lock = Lock("pm-expiry", ttl=0.2)
    assert lock.acquire()
    assert wait_until(lambda: not redis.exists("redislock:{pm-expiry}"), timeout=10)
    with pytest.raises(LockNotOwned):
        lock.release()
    assert changes(before, snapshot({"lock"}, "pm-expiry")) == {
        ("acq", "lock", "acquired"): 1,
        ("wait", "lock", "acquired"): 1,
        ("hold", "lock"): 1,
        ("lost", "lock"): 1,
    }
    held = value("redislock_hold_seconds_bucket", kind="lock", family="pm-expiry", le="0.1")
    assert held == 0  # it was held past its 0.2 s TTL


def test_the_gauges_show_what_this_process_holds_and_waits_for(metrics: None) -> None:
    held, waiting = ("redislock_held", "redislock_waiting")
    base_held, base_waiting = value(held, kind="lock"), value(waiting, kind="lock")
    holder = Lock("pm-gauges", ttl=5)
    assert holder.acquire()
    assert value(held, kind="lock") == base_held + 1
    contended = threading.Event()

    def on_contended(event: LockEvent) -> None:
        if event.type == events.CONTENDED and event.name == "pm-gauges":
            contended.set()

    events.subscribe(on_contended)
    try:
        waiter = Lock("pm-gauges", ttl=5)
        thread = threading.Thread(target=waiter.acquire, kwargs={"timeout": 30})
        thread.start()
        assert contended.wait(30)
        assert value(waiting, kind="lock") == base_waiting + 1
        holder.release()
        thread.join(30)
    finally:
        events.unsubscribe(on_contended)
    assert waiter.owned()
    assert value(waiting, kind="lock") == base_waiting
    assert value(held, kind="lock") == base_held + 1  # the waiter's now
    waiter.release()
    assert value(held, kind="lock") == base_held


def test_families_not_names_are_labels(metrics: None) -> None:
    for invoice in range(3):
        with Lock(f"pm-invoice:{invoice}", ttl=TTL):
            pass
    with Lock("pm-refund-42", metrics_name="pm-refunds", ttl=TTL):
        pass
    families = {
        sample.labels["family"]
        for metric in REGISTRY.collect()
        if metric.name == "redislock_acquisitions"
        for sample in metric.samples
    }
    assert {"pm-invoice", "pm-refunds"} <= families
    assert not any(family.startswith(("pm-invoice:", "pm-refund-42")) for family in families)


def test_disabled_nothing_is_counted(metrics: None) -> None:
    prometheus.disable()
    try:
        with Lock("pm-off", ttl=TTL):
            pass
    finally:
        prometheus.enable()
    counted = value("redislock_acquisitions_total", kind="lock", family="pm-off", result="acquired")
    assert counted == 0


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.support.settings", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


SETUP = (
    "import sys, django;"
    "WATCHED = ('prometheus_client', 'opentelemetry', 'django_redislock.contrib.',"
    " 'django_redislock.history');"
    "from django.conf import settings;"
    "settings.REDISLOCK = {**getattr(settings, 'REDISLOCK', {}), 'METRICS': %s};"
    "django.setup();"
)
CYCLE = SETUP + (
    "from django_redislock import Lock;"
    "lock = Lock('pm-subprocess', ttl=1); lock.acquire(); lock.release();"
    "print(sorted(m for m in sys.modules if m.startswith(WATCHED)))"
)
#: The same through redis-py alone: redis-py 7 imports opentelemetry itself when it is
#: installed (redis.observability), which is not ours to count.
BASELINE = SETUP + (
    "from django_redis import get_redis_connection;"
    "get_redis_connection('default').set('pm-subprocess', 1);"
    "print(sorted(m for m in sys.modules if m.startswith(WATCHED)))"
)


def test_off_nothing_is_imported_by_the_package_or_a_lock_cycle() -> None:
    done, baseline = _python(CYCLE % "False"), _python(BASELINE % "False")
    assert done.returncode == 0, done.stderr
    assert baseline.returncode == 0, baseline.stderr
    assert done.stdout.strip() == baseline.stdout.strip()
    assert "prometheus_client" not in done.stdout


def test_on_the_app_counts_from_startup() -> None:
    done = _python(
        CYCLE % "True" + ";from prometheus_client import REGISTRY;"
        "print(REGISTRY.get_sample_value('redislock_acquisitions_total',"
        " {'kind': 'lock', 'family': 'pm-subprocess', 'result': 'acquired'}))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "1.0"


def test_on_without_prometheus_client_says_which_extra_to_install() -> None:
    done = _python("import sys; sys.modules['prometheus_client'] = None;" + CYCLE % "True")
    assert done.returncode != 0
    assert "pip install 'django-redislock[prometheus]'" in done.stderr


# -- a real gunicorn with 2 workers, prometheus_client's multiprocess mode ----------------------


@pytest.fixture
def gunicorn_site(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    config = tmp_path / "gunicorn.conf.py"  # the docs' child_exit, as a user copies it
    config.write_text(examples(DOCS)["gunicorn-config"].code)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.support.metrics_site",
        "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
    }
    with gunicorn("-w", "2", "--threads", "4", "-c", str(config), env=env, ready="/metrics") as url:
        yield url, multiproc


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.slow
def test_metrics_add_up_to_the_requests_served_by_two_gunicorn_workers(
    gunicorn_site: tuple[str, Path],
) -> None:
    from concurrent.futures import ThreadPoolExecutor

    url, multiproc = gunicorn_site
    requests = 60
    with ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(get, [url + "/report/"] * requests))
    assert answers == ["done"] * requests
    family = {("kind", "lock"), ("family", "metrics-site")}

    def of(text: str, name: str, **labels: str) -> float:
        key = (name, frozenset(family | set(labels.items())))
        return _samples(text).get(key, 0.0)

    ours = get(url + "/metrics") or ""
    assert of(ours, "redislock_acquisitions_total", result="acquired") == requests
    assert of(ours, "redislock_wait_seconds_count", result="acquired") == requests
    assert of(ours, "redislock_hold_seconds_count") == requests
    contended = of(ours, "redislock_contentions_total")
    assert 0 < contended <= requests - 1  # twelve clients at once on one name
    samples = _samples(ours)
    assert samples[("redislock_held", frozenset({("kind", "lock")}))] == 0
    assert samples[("redislock_waiting", frozenset({("kind", "lock")}))] == 0
    # Both workers counted: each wrote its own files, and the sums cover them.
    pids = {path.stem.rsplit("_", 1)[-1] for path in multiproc.glob("counter_*.db")}
    assert len(pids) == 2, pids
    # django-prometheus's own endpoint serves the same registry, beside its metrics.
    theirs = get(url + "/django-metrics") or ""
    assert of(theirs, "redislock_acquisitions_total", result="acquired") == requests
    assert "django_http_requests_total_by_method_total" in theirs


# -- docs/observability.md ---------------------------------------------------------------------


def test_the_docs_settings_switch_the_metrics_on() -> None:
    assert run_example(DOCS, "metrics-settings")["REDISLOCK"] == {"METRICS": True}


def test_the_docs_urls_serve_the_metrics(metrics: None, rf: Any) -> None:
    with Lock("pm-docs-view", ttl=TTL):
        pass
    (pattern,) = run_example(DOCS, "metrics-urls")["urlpatterns"]
    match = pattern.resolve("metrics")
    response = match.func(rf.get("/metrics"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    body = response.content.decode()
    series = 'redislock_acquisitions_total{family="pm-docs-view",kind="lock",result="acquired"}'
    assert f"{series} 1.0" in body


def test_the_docs_consumer_sees_slow_waits() -> None:
    ns = run_example(DOCS, "event-consumer")
    try:
        consumer = ns["note_slow_waits"]
        assert events.subscribed(consumer)
        consumer(LockEvent(events.ACQUIRED, "lock", "report:7", waited=2.5))
        consumer(LockEvent(events.ACQUIRED, "lock", "report:8", waited=0.1))
        assert ns["slow_waits"] == [("report", 2.5)]
    finally:
        events.unsubscribe(ns["note_slow_waits"])


# -- the Grafana dashboard ---------------------------------------------------------------------

DASHBOARD = ROOT / "docs/grafana/django-redislock.json"


def _queries() -> list[tuple[str, str]]:
    import json

    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    found = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p["targets"]]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            found.append((f"variable {variable['name']}", query["query"]))
    return found


def test_every_metric_the_dashboard_queries_is_exported_with_its_labels(metrics: None) -> None:
    import re

    from prometheus_client import generate_latest

    script(*KINDS["lock"], "pm-dashboard:1")  # every outcome once, the loss included
    labels: dict[str, set[str]] = {}
    for (sample, sample_labels), _ in _samples(generate_latest(REGISTRY).decode()).items():
        labels.setdefault(sample, set()).update(key for key, _ in sample_labels)
    queries = _queries()
    assert len(queries) >= 12
    for title, expr in queries:
        names = re.findall(r"\b(redislock_[a-z_]+)", expr)
        assert names, (title, expr)
        used = set(re.findall(r"(?:by|without) \(([^)]*)\)", expr))
        used = {label.strip() for group in used for label in group.split(",")}
        used |= set(re.findall(r"([a-z_]+)\s*=~?\s*\"", expr))
        used |= set(re.findall(r"label_values\([^,]+,\s*([a-z_]+)\)", expr))
        for name in names:
            assert name in labels, f"panel {title!r} queries {name}, which nothing exports"
            assert used <= labels[name] | {"le"}, (title, name, used - labels[name])
