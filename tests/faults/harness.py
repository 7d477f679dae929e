"""The fault-injection harness: histories, protected resources and checkers.

A *history* is a JSON-lines file; every line is one operation of one worker::

    {"worker": "w1", "op": "acquire", "token": "...", "fence": 3,
     "invoke_ns": ..., "complete_ns": ..., "ok": true, "validity_ns": ...}

``invoke_ns`` / ``complete_ns`` come from :func:`time.monotonic_ns`, which is one
system-wide clock on Linux, so lines written by different processes compare.
``validity_ns`` (acquire and release lines) is how long after ``invoke_ns`` of the
acquire the holder may believe it holds the lock (``None``: a naive holder that
believes it until it releases).

Two *protected resources* do a read-modify-write of a counter and remember every
write they accepted, in order: a SQLite row (``UPDATE ... WHERE fence < ?``) and a
Redis key behind a Lua fence check (``resource.lua`` beside this file). Either can
be built with ``enforce=False`` (no fence check), the unprotected baseline.

*Checkers* (each returns a list of violations, empty when the history is fine):

1. :func:`check_fences`: fences the resource accepted strictly increase;
2. :func:`check_windows`: no two "believed valid" windows overlap — a window runs
   from an acquire's completion to ``min(release invoke, acquire invoke + validity)``;
3. :func:`check_counter`: the counter equals the number of accepted increments
   (no lost update);

plus :func:`check_issued_fences` (fences handed out by the lock grow from holder to
holder).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from tests.support import polling

RESOURCE_LUA = (Path(__file__).with_name("resource.lua")).read_text("utf-8")
RESOURCE_READ_LUA = (Path(__file__).with_name("resource_read.lua")).read_text("utf-8")

NS = 1_000_000_000


def now_ns() -> int:
    return time.monotonic_ns()


def seconds_to_ns(value: float) -> int:
    """A ``time.monotonic()`` reading (seconds) on the ``monotonic_ns`` scale."""
    return round(value * NS)


# -- histories -----------------------------------------------------------------------------


class History:
    """Appends one JSON line per operation (flushed at once: a SIGKILL loses nothing)."""

    def __init__(self, path: str | os.PathLike[str], worker: str) -> None:
        self.path = str(path)
        self.worker = worker
        self._file = open(self.path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    def record(
        self,
        op: str,
        *,
        invoke_ns: int,
        complete_ns: int | None = None,
        ok: bool | None = None,
        token: str | None = None,
        fence: int | None = None,
        validity_ns: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        line = {
            "worker": self.worker,
            "op": op,
            "token": token,
            "fence": fence,
            "invoke_ns": invoke_ns,
            "complete_ns": now_ns() if complete_ns is None else complete_ns,
            "ok": ok,
            "validity_ns": validity_ns,
            **extra,
        }
        self._file.write(json.dumps(line) + "\n")
        return line

    def close(self) -> None:
        self._file.close()


def read_history(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def lock_validity_ns(lock: Any, invoke_ns: int) -> int | None:
    """The lock's current ``valid_until`` as a duration from ``invoke_ns``."""
    if lock.valid_until is None:
        return None
    return seconds_to_ns(lock.valid_until) - invoke_ns


# -- protected resources -------------------------------------------------------------------


class SqliteResource:
    """A counter row that accepts a write only with a fence above the last accepted one."""

    def __init__(self, path: str | os.PathLike[str], *, enforce: bool = True) -> None:
        self.path = str(path)
        self.enforce = enforce
        self._db: sqlite3.Connection | None = None

    def create(self) -> None:
        with contextlib.closing(sqlite3.connect(self.path)) as db, db:
            db.execute("DROP TABLE IF EXISTS resource")
            db.execute("DROP TABLE IF EXISTS accepted")
            db.execute("CREATE TABLE resource (id INTEGER PRIMARY KEY, counter INT, fence INT)")
            db.execute(
                "CREATE TABLE accepted (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                "fence INT, worker TEXT, counter INT)"
            )
            db.execute("INSERT INTO resource VALUES (1, 0, 0)")

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        return self._db

    def read(self) -> int:
        (counter,) = self.db.execute("SELECT counter FROM resource WHERE id = 1").fetchone()
        return int(counter)

    def write(self, counter: int, fence: int, worker: str) -> bool:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            if self.enforce:
                cursor = db.execute(
                    "UPDATE resource SET counter = ?, fence = ? WHERE id = 1 AND fence < ?",
                    (counter, fence, fence),
                )
            else:
                cursor = db.execute(
                    "UPDATE resource SET counter = ?, fence = ? WHERE id = 1", (counter, fence)
                )
            accepted = cursor.rowcount == 1
            if accepted:
                db.execute(
                    "INSERT INTO accepted (fence, worker, counter) VALUES (?, ?, ?)",
                    (fence, worker, counter),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return accepted

    def accepted(self) -> list[tuple[int, str, int]]:
        rows = self.db.execute("SELECT fence, worker, counter FROM accepted ORDER BY seq")
        return [(int(f), str(w), int(c)) for f, w, c in rows]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


class RedisResource:
    """A counter in Redis behind a Lua fence check (``resource.lua``)."""

    PREFIX = "faults:resource"

    def __init__(self, url: str, *, enforce: bool = True, prefix: str = PREFIX) -> None:
        self.url = url
        self.enforce = enforce
        self.client = redis.Redis.from_url(url, socket_timeout=10)
        self.keys = [f"{prefix}:counter", f"{prefix}:fence", f"{prefix}:log"]
        #: With a key here, reads are fenced too (:class:`FencedReadResource`).
        self.seen_key: list[str] = []

    def create(self) -> None:
        self.client.delete(*self.keys, *self.seen_key)

    def read(self) -> int:
        return int(self.client.get(self.keys[0]) or 0)

    def write(self, counter: int, fence: int, worker: str) -> bool:
        keys = [*self.keys, *self.seen_key]
        result = self.client.eval(
            RESOURCE_LUA, len(keys), *keys, counter, fence, worker, "1" if self.enforce else "0"
        )
        return int(result) == 1

    def accepted(self) -> list[tuple[int, str, int]]:
        out = []
        for raw in self.client.lrange(self.keys[2], 0, -1):
            fence, worker, counter = raw.decode().split("|", 2)
            out.append((int(fence), worker, int(counter)))
        return out

    def close(self) -> None:
        self.client.close()


class FencedReadResource(RedisResource):
    """A :class:`RedisResource` that checks the fence on reads as well as on writes.

    Write-only fencing refuses a late write only once the successor has written: a holder
    paused between its read and its write, past its TTL, whose write lands while its
    successor is between its own read and write, still gets in, and one increment is lost.
    Here the resource remembers the highest fence that read it and refuses older reads and
    writes, so a read-modify-write is as safe as the fences.
    """

    def __init__(self, url: str, *, enforce: bool = True, prefix: str = "faults:fenced") -> None:
        super().__init__(url, enforce=enforce, prefix=prefix)
        self.seen_key = [f"{prefix}:seen"]

    def fenced_read(self, fence: int) -> int | None:
        """The counter, read with ``fence``; None when a newer fence has read it."""
        keys = [self.keys[0], *self.seen_key]
        value = self.client.eval(RESOURCE_READ_LUA, 2, *keys, fence, "1" if self.enforce else "0")
        return None if value is None else int(value)


def open_resources(
    sqlite_path: str | None, redis_url: str | None, *, enforce: bool
) -> list[SqliteResource | RedisResource]:
    resources: list[SqliteResource | RedisResource] = []
    if sqlite_path:
        resources.append(SqliteResource(sqlite_path, enforce=enforce))
    if redis_url:
        resources.append(RedisResource(redis_url, enforce=enforce))
    return resources


# -- checkers ----------------------------------------------------------------------------


def check_fences(accepted: list[tuple[int, str, int]], what: str = "resource") -> list[str]:
    """(1) Every accepted fence is strictly higher than the one accepted before it."""
    out = []
    for (prev, prev_worker, _), (fence, worker, _) in itertools.pairwise(accepted):
        if fence <= prev:
            out.append(
                f"{what}: accepted fence {fence} from {worker} after fence {prev} "
                f"from {prev_worker} (a stale write got through)"
            )
    return out


def check_counter(final: int, accepted: list[tuple[int, str, int]], what: str) -> list[str]:
    """(3) The read-modify-write counter equals the number of accepted increments."""
    if final != len(accepted):
        return [f"{what}: counter is {final} after {len(accepted)} accepted increments"]
    return []


@dataclass
class Window:
    worker: str
    fence: int | None
    start: int
    end: float  # ns; math.inf for a holder that never stops believing


def windows(history: list[dict[str, Any]]) -> list[Window]:
    """The "believed valid" window of every successful acquire in ``history``."""
    out = []
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for line in sorted(history, key=lambda item: item["invoke_ns"]):
        by_worker.setdefault(line["worker"], []).append(line)
    for worker, lines in by_worker.items():
        for i, line in enumerate(lines):
            if line["op"] != "acquire" or not line["ok"]:
                continue
            release = next(
                (other for other in lines[i + 1 :] if other["op"] in ("release", "acquire")),
                None,
            )
            if release is not None and release["op"] == "acquire":
                release = None
            end = float("inf") if release is None else release["invoke_ns"]
            validity = line.get("validity_ns")
            if validity is not None:  # None: a naive holder believes it until it releases
                if release is not None and release.get("validity_ns") is not None:
                    validity = max(validity, release["validity_ns"])  # renewed meanwhile
                end = min(end, line["invoke_ns"] + validity)
            out.append(Window(worker, line.get("fence"), line["complete_ns"], end))
    return out


def check_windows(history: list[dict[str, Any]]) -> list[str]:
    """(2) No two believed-valid windows overlap."""
    out = []
    spans = sorted(windows(history), key=lambda w: w.start)
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if b.start >= a.end:
                continue
            if b.worker == a.worker:
                continue
            overlap = (min(a.end, b.end) - b.start) / 1e6
            out.append(
                f"windows overlap: {a.worker} (fence {a.fence}) and {b.worker} "
                f"(fence {b.fence}) both believed they held the lock for {overlap:.1f} ms"
            )
    return out


def check_issued_fences(history: list[dict[str, Any]]) -> list[str]:
    """Fences of successful acquires, in completion order, strictly grow."""
    acquired = sorted(
        (line for line in history if line["op"] == "acquire" and line["ok"]),
        key=lambda line: line["complete_ns"],
    )
    out = []
    for prev, line in itertools.pairwise(acquired):
        if (
            line["fence"] is not None
            and prev["fence"] is not None
            and line["fence"] <= prev["fence"]
        ):
            out.append(
                f"issued fence went back: {line['worker']} got {line['fence']} after "
                f"{prev['worker']} got {prev['fence']}"
            )
    return out


def check_resources(resources: list[SqliteResource | RedisResource]) -> list[str]:
    """Checkers (1) and (3) on every resource."""
    out = []
    for resource in resources:
        what = type(resource).__name__
        accepted = resource.accepted()
        out += check_fences(accepted, what)
        out += check_counter(resource.read(), accepted, what)
    return out


# -- processes -----------------------------------------------------------------------------


def wait_stopped(pid: int, timeout: float = 30.0) -> None:
    """Wait until child ``pid`` stopped itself (SIGSTOP); raise if it exited instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if got == pid:
            if os.WIFSTOPPED(status):
                return
            raise RuntimeError(f"worker {pid} exited (status {status}) instead of pausing")
        time.sleep(0.002)
    raise TimeoutError(f"worker {pid} did not pause within {timeout}s")


def wait_exit(pid: int, timeout: float = 30.0) -> int:
    """Wait for child ``pid`` to exit; its exit code."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got, status = os.waitpid(pid, os.WNOHANG)
        if got == pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.005)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    raise TimeoutError(f"worker {pid} did not finish within {timeout}s")


#: Poll a condition with no event to await (a key expiring in Redis), bounded; the fault
#: scenarios poll finer than the tests (2 ms) to resume a frozen worker right on time.
wait_until = functools.partial(polling.wait_until, interval=0.002)


@dataclass
class RunResult:
    """What one run of one scenario found."""

    violations: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)

    def extend(self, items: list[str]) -> None:
        self.violations.extend(items)


@contextlib.contextmanager
def timed() -> Iterator[list[int]]:
    """``with timed() as t:`` — ``t == [invoke_ns, complete_ns]`` afterwards."""
    span = [now_ns()]
    try:
        yield span
    finally:
        span.append(now_ns())
