"""Scenario 7: one locked view under a real gunicorn, three ways of locking it and none.

gunicorn (4 workers x 4 threads, ``gthread``) serves ``bench/site.py``; 32 HTTP clients
(threads of this process, keep-alive connections) call one view for a fixed window. The
view's critical section is a 2 ms read-modify-write of a Redis counter; the share of the
serial limit is the time the lock was held over the window (1.00 = the lock never idle).
"""

from __future__ import annotations

import http.client
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import redis

from bench.context import Context
from bench.report import Section, Table
from bench.stats import fmt

REPO = Path(__file__).resolve().parents[2]
CLIENTS = 32
VIEWS = [
    ("django-redis `cache.lock()`", "/cache-lock/", "bench-s7:cache-lock"),
    (
        "`cache.lock()` with `RedisLockClient`",
        "/cache-lock-switched/",
        "bench-s7:cache-lock-switched",
    ),
    ("`lock_view`", "/lock-view/", "bench-s7:lock-view"),
    ("no lock (loses updates)", "/no-lock/", "bench-s7:no-lock"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_gunicorn(url: str, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bench.site", "BENCH_REDIS_URL": url}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", "4", "--threads", "4",
            "-b", f"127.0.0.1:{port}", "--log-level", "warning", "--keep-alive", "30",
            "django.core.wsgi:get_wsgi_application()",
        ],
        cwd=REPO,
        env=env,
    )  # fmt: skip


def _wait_ready(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/lock-view/")
            connection.getresponse().read()
            connection.close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("gunicorn did not answer")


def _load(port: int, path: str, seconds: float) -> tuple[list[float], int, float]:
    """Latencies (ms) of the answered requests, the count of errors, the window (s)."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client() -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        mine: list[float] = []
        failed = 0
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            try:
                connection.request("GET", path)
                response = connection.getresponse()
                response.read()
                ok = response.status == 200
            except OSError:
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                ok = False
            if ok:
                mine.append((time.perf_counter() - started) * 1000)
            else:
                failed += 1
        connection.close()
        with lock:
            latencies.extend(mine)
            errors[0] += failed

    threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies, errors[0], time.monotonic() - began


def run(ctx: Context) -> Section:
    """Each view for one window; the counter checked against the answered requests."""
    section = Section("7. A locked view under gunicorn")
    try:
        import gunicorn  # noqa: F401
    except ImportError:
        section.skipped = "gunicorn is not installed (the dev extra has it)"
        return section
    seconds = ctx.sizes(3.0, 10.0)
    section.intro = (
        f"gunicorn, 4 workers x 4 threads; {CLIENTS} HTTP clients with keep-alive call one "
        f"view for {seconds:g} s. The view holds its lock for a 2 ms read-modify-write of a "
        "Redis counter. *share of serial* = time the lock was held / the window; "
        "*exact* = the counter equals the requests answered (the unlocked row must show "
        "lost updates; its share of serial counts overlapping sections, so it can pass 100%)."
    )
    admin = redis.Redis.from_url(ctx.target.url)
    port = _free_port()
    server = _start_gunicorn(ctx.target.url, port)
    columns = ["locking", "req/s", "share of serial", "p50 ms", "p99 ms", "max ms", "errors"]
    table = Table([*columns, "exact"])
    try:
        _wait_ready(port, time.monotonic() + 60)
        for label, path, counter in VIEWS:
            admin.delete(counter, f"{counter}:busy_us")
            latencies, errors, window = _load(port, path, seconds)
            # Requests still in a worker after the window finish before the counter is read.
            time.sleep(0.5)
            count = int(admin.get(counter) or 0)
            busy = int(admin.get(f"{counter}:busy_us") or 0) / 1e6
            latencies.sort()
            p99 = latencies[int(len(latencies) * 0.99) - 1] if latencies else 0.0
            table.rows.append(
                [
                    label,
                    fmt(len(latencies) / window),
                    f"{busy / window:.0%}",
                    fmt(statistics.median(latencies)) if latencies else "-",
                    fmt(p99),
                    fmt(latencies[-1]) if latencies else "-",
                    str(errors),
                    "yes" if count == len(latencies) else f"no ({count} vs {len(latencies)})",
                ]
            )
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        admin.close()
    section.tables.append(table)
    return section
