"""The demo's pages. Each one shows one feature; the home page links them all."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from django_redislock import LockInfo, lock_info, lock_view
from django_redislock.inspection import scan_page

from .management.commands.election_candidate import ELECTION, election_dir
from .management.commands.rwlock_worker import PRICE_LIST, rwlock_dir
from .management.commands.rwlock_worker import TTL as RWLOCK_TTL
from .management.commands.semaphore_worker import LIMIT as SEMAPHORE_LIMIT
from .management.commands.semaphore_worker import SEMAPHORE, semaphore_dir
from .management.commands.semaphore_worker import TTL as SEMAPHORE_TTL
from .models import DemoEvent, Ledger, Report

MANAGE = Path(__file__).resolve().parent.parent / "manage.py"
REPORT_TTL = 10.0  # seconds; the watchdog renews it while the report is being built


def manage_command(*args: str) -> list[str]:
    """The argv that runs ``python demo_site/manage.py <args>`` with this interpreter."""
    return [sys.executable, str(MANAGE), *args]


def server_info() -> dict[str, Any]:
    """What the home page says about the Redis server(s) the locks use."""
    from django_redis import get_redis_connection

    info: dict[str, Any] = {
        "url": settings.REDIS_URL,
        "source": settings.REDIS_SOURCE,
        "redlock_urls": settings.REDLOCK_URLS,
    }
    try:
        server = get_redis_connection("default").info("server")
    except Exception as exc:
        info["error"] = str(exc)
        return info
    if "valkey_version" in server:
        info["version"] = f"valkey {server['valkey_version']}"
    else:
        info["version"] = f"redis {server.get('redis_version', '?')}"
    return info


def home(request: HttpRequest) -> HttpResponse:
    try:
        locks = sorted(scan_page("*", None, 50)[0], key=lambda i: i.name)
        error = None
    except Exception as exc:
        locks, error = [], str(exc)
    return render(
        request,
        "demo/home.html",
        {"server": server_info(), "locks": locks, "locks_error": error},
    )


# -- the locked view: HTTP 423 with Retry-After when busy ---------------------------------


def report_busy(request: HttpRequest, info: LockInfo | None) -> HttpResponse:
    """``on_busy`` of the regenerate view: the 423 page that explains itself."""
    seconds = 1 if info is None or info.ttl is None else max(1, math.ceil(info.ttl))
    response = render(
        request,
        "demo/locked.html",
        {"info": info, "retry_after": seconds, "ttl": REPORT_TTL},
        status=423,
    )
    response["Retry-After"] = str(seconds)
    return response


def report(request: HttpRequest) -> HttpResponse:
    report, _ = Report.objects.get_or_create(name="sales")
    return render(
        request,
        "demo/report.html",
        {"report": report, "seconds": settings.DEMO_REPORT_SECONDS, "ttl": REPORT_TTL},
    )


@require_POST
@lock_view("report:{report}", ttl=REPORT_TTL, watchdog=True, on_busy=report_busy)
def regenerate_report(request: HttpRequest, report: str) -> HttpResponse:
    """Rebuild the report: takes DEMO_REPORT_SECONDS, one at a time per report."""
    started = time.monotonic()
    time.sleep(settings.DEMO_REPORT_SECONDS)  # the expensive part
    row, _ = Report.objects.get_or_create(name=report)
    row.generated_at = timezone.now()
    row.generated_by = f"pid {os.getpid()}"
    row.seconds = time.monotonic() - started
    row.runs += 1
    row.save()
    messages.success(request, f"Report “{report}” regenerated in {row.seconds:.1f} s.")
    return redirect("report")


# -- the fencing demo: a holder frozen past its TTL ----------------------------------------


def fencing(request: HttpRequest) -> HttpResponse:
    run = request.GET.get("run") or ""
    events = list(DemoEvent.objects.filter(run=run)) if run else []
    finished = any(e.kind == "done" for e in events)
    ledger = Ledger.objects.filter(name=f"run:{run}").first() if run else None
    return render(
        request,
        "demo/fencing.html",
        {
            "run": run,
            "events": events,
            "running": bool(run) and not finished,
            "finished": finished,
            "ledger": ledger,
        },
    )


@require_POST
def fencing_run(request: HttpRequest) -> HttpResponse:
    run = uuid.uuid4().hex[:12]
    args = ["freeze_demo", "--run", run]
    if request.POST.get("watchdog"):
        args.append("--watchdog")
    log = open(Path(settings.VAR_DIR) / "freeze_demo.log", "ab")  # noqa: SIM115
    with log:
        subprocess.Popen(
            manage_command(*args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return redirect(f"/fencing/?run={run}#run")


# -- the locked management command, as cron runs it ----------------------------------------


def _run_twice() -> list[dict[str, Any]]:
    """Start ``rebuild_reports``, and again once the first holds its lock; both outputs."""
    first = subprocess.Popen(
        manage_command("rebuild_reports", "--seconds", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None
    started = first.stdout.readline()  # "rebuilding reports": it holds the lock now
    second = subprocess.Popen(
        manage_command("rebuild_reports", "--seconds", "2"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    runs = []
    for label, process, head in (
        ("first run", first, started),
        ("second run, started while the first one runs", second, ""),
    ):
        out, err = process.communicate(timeout=60)
        runs.append(
            {"label": label, "stdout": head + out, "stderr": err, "status": process.returncode}
        )
    return runs


def command(request: HttpRequest) -> HttpResponse:
    runs = _run_twice() if request.method == "POST" else []
    return render(request, "demo/command.html", {"runs": runs})


def contention(request: HttpRequest) -> HttpResponse:
    output = None
    if request.method == "POST":
        done = subprocess.run(
            manage_command("lock_contention", "--workers", "4", "--seconds", "3"),
            capture_output=True,
            text=True,
            timeout=120,
        )
        output = done.stdout + done.stderr
    return render(request, "demo/contention.html", {"output": output})


# -- leader election: three candidates, one leader ---------------------------------------


def _candidates() -> list[dict[str, Any]]:
    found = []
    for pid_file in sorted(election_dir().glob("*.pid")):
        pid = int(pid_file.read_text() or 0)
        found.append({"label": pid_file.stem, "pid": pid, "alive": _alive(pid)})
    return found


def _alive(pid: int) -> bool:
    """Running (a killed candidate stays a zombie until make demo's launcher reaps it)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _recent_events(events_file: Path) -> list[dict[str, str]]:
    """The last dozen lines of an events log ("<stamp> <who> <text>"), newest first."""
    lines = events_file.read_text().splitlines()[-12:] if events_file.exists() else []
    events = []
    for line in reversed(lines):
        if line.count(" ") < 2:
            continue  # being appended to right now
        stamp, label, text = line.split(" ", 2)
        at = dt.datetime.fromtimestamp(float(stamp)).strftime("%H:%M:%S")
        events.append({"at": at, "who": label, "text": text})
    return events


def _election_status() -> dict[str, Any]:
    """What the election page shows: rendered once by the page, then fetched every second."""
    info = lock_info(ELECTION)
    leader = None
    if info is not None:
        ttl = round(info.ttl, 1) if info.ttl is not None else None
        leader = {"label": info.purpose, "pid": info.owner.pid, "term": info.fence, "ttl": ttl}
    candidates = [
        {
            "label": c["label"],
            "pid": c["pid"],
            "state": (
                "killed"
                if not c["alive"]
                else "leader"
                if leader and leader["label"] == c["label"]
                else "waiting"
            ),
        }
        for c in _candidates()
    ]
    events = _recent_events(election_dir() / "events.log")
    return {"leader": leader, "candidates": candidates, "events": events}


def election(request: HttpRequest) -> HttpResponse:
    return render(request, "demo/election.html", {**_election_status(), "name": ELECTION})


def election_status(request: HttpRequest) -> JsonResponse:
    """The page's status part as JSON: the page refreshes it without reloading (a click
    on "Kill the leader" landing during a reload used to be lost)."""
    return JsonResponse(_election_status())


@require_POST
def election_kill(request: HttpRequest) -> HttpResponse:
    """SIGKILL the leader: it cannot resign, so the others wait for its lease to run out."""
    info = lock_info(ELECTION)
    if info is not None and info.owner.pid and info.owner.host == socket.gethostname():
        with contextlib.suppress(OSError):
            os.kill(info.owner.pid, signal.SIGKILL)
    return redirect("/election/")


@require_POST
def election_join(request: HttpRequest) -> HttpResponse:
    """Start one more candidate (after a kill or two, the election needs fresh ones)."""
    labels = {c["label"] for c in _candidates()}
    label = next(f"candidate-{n}" for n in range(1, 100) if f"candidate-{n}" not in labels)
    subprocess.Popen(
        manage_command("election_candidate", "--label", label),
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return redirect("/election/")


# -- Semaphore: eight workers, three permits ----------------------------------------------

SEMAPHORE_WORKERS = 8


def _workers(directory: Path) -> list[dict[str, Any]]:
    """The workers a page started (demo.page_workers): label, pid, alive, state, since."""
    found = []
    for pid_file in sorted(directory.glob("*.pid"), key=lambda p: int(p.stem.split("-")[1])):
        pid = int(pid_file.read_text() or 0)
        state_file = pid_file.with_suffix(".state")
        stamp, _, state = (state_file.read_text() if state_file.exists() else "0 ").partition(" ")
        found.append(
            {"label": pid_file.stem, "pid": pid, "alive": _alive(pid), "since": float(stamp),
             "state": state}
        )  # fmt: skip
    return found


def _semaphore_status() -> dict[str, Any]:
    """What the Semaphore page shows: rendered once by the page, then fetched every second."""
    from django_redislock import Semaphore

    semaphore = Semaphore(SEMAPHORE, SEMAPHORE_LIMIT)
    permits = [
        {"label": h.purpose, "pid": h.pid, "fence": h.fence,
         "ttl": round(h.ttl, 1) if h.ttl is not None else None}
        for h in semaphore.holders()
    ]  # fmt: skip
    holding = {p["label"] for p in permits}
    now = time.time()
    workers = _workers(semaphore_dir())
    line = sorted(
        (
            w
            for w in workers
            if w["alive"] and w["state"] == "waiting" and w["label"] not in holding
        ),
        key=lambda w: w["since"],
    )
    killed = [w["label"] for w in workers if not w["alive"]]
    events = _recent_events(semaphore_dir() / "events.log")
    return {
        "limit": SEMAPHORE_LIMIT,
        "permits": [{**p, "killed": p["label"] in killed} for p in permits],
        "line": [{"label": w["label"], "waiting": round(now - w["since"], 1)} for w in line],
        "workers": len([w for w in workers if w["alive"]]),
        "killed": killed,
        "events": events,
    }


def semaphore_page(request: HttpRequest) -> HttpResponse:
    context = {**_semaphore_status(), "name": SEMAPHORE, "ttl": SEMAPHORE_TTL}
    return render(request, "demo/semaphore.html", {**context, "count": SEMAPHORE_WORKERS})


def semaphore_status(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_semaphore_status())


@require_POST
def semaphore_start(request: HttpRequest) -> HttpResponse:
    """Start the eight workers (those already running are kept; the dead are replaced)."""
    alive = {w["label"] for w in _workers(semaphore_dir()) if w["alive"]}
    for number in range(1, SEMAPHORE_WORKERS + 1):
        label = f"worker-{number}"
        if label in alive:
            continue
        for stale in (".pid", ".state"):
            (semaphore_dir() / f"{label}{stale}").unlink(missing_ok=True)
        subprocess.Popen(
            manage_command("semaphore_worker", "--label", label),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return redirect("/semaphore/")


@require_POST
def semaphore_kill(request: HttpRequest) -> HttpResponse:
    """SIGKILL the longest holder: its permit stays taken until its lease runs out."""
    from django_redislock import Semaphore

    for holder in Semaphore(SEMAPHORE, SEMAPHORE_LIMIT).holders():
        if holder.pid and holder.host == socket.gethostname() and _alive(holder.pid):
            with contextlib.suppress(OSError):
                os.kill(holder.pid, signal.SIGKILL)
            break
    return redirect("/semaphore/")


# -- Read-write lock: five readers in a stream, one writer ------------------------------

RWLOCK_WORKERS = {"reader-1": "read", "reader-2": "read", "reader-3": "read",
                  "reader-4": "read", "reader-5": "read", "writer-6": "write"}  # fmt: skip


def _rwlock_status() -> dict[str, Any]:
    """What the read-write lock page shows: rendered once, then fetched every second."""
    info = lock_info(PRICE_LIST)
    holders = [
        {"label": h.purpose, "pid": h.pid, "fence": h.fence,
         "ttl": round(h.ttl, 1) if h.ttl is not None else None}
        for h in (info.holders if info is not None else ())
    ]  # fmt: skip
    now = time.time()
    workers = _workers(rwlock_dir())
    holding = {h["label"] for h in holders}
    waiting = sorted(
        (
            w
            for w in workers
            if w["alive"] and w["state"] == "waiting" and w["label"] not in holding
        ),
        key=lambda w: w["since"],
    )
    events = _recent_events(rwlock_dir() / "events.log")
    waits = [float(e["text"].rsplit(" ", 2)[1]) for e in events if "after waiting" in e["text"]]
    return {
        "mode": info.kind if info is not None else "free",
        "holders": holders,
        "waiting": [
            {
                "label": w["label"],
                "role": RWLOCK_WORKERS.get(w["label"], "?"),
                "waiting": round(now - w["since"], 1),
            }
            for w in waiting
        ],
        "workers": len([w for w in workers if w["alive"]]),
        "writer_waits": waits,
        "events": events,
    }


def rwlock_page(request: HttpRequest) -> HttpResponse:
    context = {**_rwlock_status(), "name": PRICE_LIST, "ttl": RWLOCK_TTL}
    return render(request, "demo/rwlock.html", context)


def rwlock_status(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_rwlock_status())


@require_POST
def rwlock_start(request: HttpRequest) -> HttpResponse:
    """Start the five readers and the writer (those already running are kept)."""
    alive = {w["label"] for w in _workers(rwlock_dir()) if w["alive"]}
    for label, role in RWLOCK_WORKERS.items():
        if label in alive:
            continue
        for stale in (".pid", ".state"):
            (rwlock_dir() / f"{label}{stale}").unlink(missing_ok=True)
        subprocess.Popen(
            manage_command("rwlock_worker", "--label", label, "--role", role),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return redirect("/rwlock/")


# -- Celery: the same report task enqueued five times, one run ---------------------------

CELERY_SESSION_KEY = "celery_task_ids"


def _task_rows(ids: list[str]) -> list[dict[str, Any]]:
    from django_redislock.contrib.celery import is_skipped

    from .tasks import app

    rows = []
    for task_id in ids:
        result = app.AsyncResult(task_id)
        row: dict[str, Any] = {"id": task_id, "state": result.state, "outcome": "waiting"}
        if result.successful():
            value = result.result
            if is_skipped(value):
                row["outcome"] = "skipped: another run holds the lock"
            else:
                row["outcome"] = f"ran (fence {value['fence']})"
        elif result.state == "STARTED":
            row["outcome"] = "running or checking the lock"
        elif result.failed():
            row["outcome"] = f"failed: {result.result!r}"
        rows.append(row)
    return rows


def celery_page(request: HttpRequest) -> HttpResponse:
    ids = request.session.get(CELERY_SESSION_KEY, [])
    rows = _task_rows(ids)
    ran = sum(row["outcome"].startswith("ran") for row in rows)
    skipped = sum(row["outcome"].startswith("skipped") for row in rows)
    done = bool(rows) and ran + skipped == len(rows)
    return render(
        request,
        "demo/celery.html",
        {"rows": rows, "ran": ran, "skipped": skipped, "done": done, "pending": rows and not done},
    )


@require_POST
def celery_enqueue(request: HttpRequest) -> HttpResponse:
    """``build_report.delay("sales")`` five times in a row."""
    from .tasks import build_report

    request.session[CELERY_SESSION_KEY] = [build_report.delay("sales").id for _ in range(5)]
    return redirect("/celery/")
