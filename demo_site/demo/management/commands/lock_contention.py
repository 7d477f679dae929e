"""``manage.py lock_contention --workers 4 --seconds 10``: processes fighting over one lock.

Each worker process loops: acquire (blocking), note ``time.monotonic()`` (system-wide on
Linux, so times compare across processes), hold ``--hold-ms``, note the time, release.
The parent shows a live progress bar and, at the end, a table: acquisitions per worker,
hand-off gaps (one worker's release to the next worker's acquire) p50/p99/max, the
longest wait, and overlaps (an acquire before the previous holder's release: must be 0).
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import queue
import statistics
import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

LOCK_NAME = "demo:contention"


def _worker(index: int, seconds: float, hold: float, start: Any, results: Any) -> None:
    """One process: acquire/hold/release until the time is up; report every interval."""
    import django

    django.setup()
    from django_redislock import Lock

    results.put((index, "ready"))
    start.wait()
    deadline = time.monotonic() + seconds
    intervals: list[tuple[float, float, float]] = []  # (asked, acquired, released)
    sent, last_sent = 0, time.monotonic()
    while True:
        asked = time.monotonic()
        if asked >= deadline:
            break
        lock = Lock(LOCK_NAME, ttl=5, timeout=max(deadline - asked, 0.0), purpose="lock_contention")
        if not lock.acquire():
            break
        acquired = time.monotonic()
        if hold:
            time.sleep(hold)
        released = time.monotonic()
        lock.release()
        intervals.append((asked, acquired, released))
        if released - last_sent >= 0.1:  # live progress, ten times a second
            results.put((index, intervals[sent:]))
            sent, last_sent = len(intervals), released
    results.put((index, intervals[sent:]))
    results.put((index, None))


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, round(fraction * len(ordered) + 0.5 - 1e-9))
    return ordered[min(rank, len(ordered)) - 1]


def summarize(per_worker: dict[int, list[tuple[float, float, float]]]) -> dict[str, Any]:
    """Counts, hand-off gaps and overlaps from every worker's (asked, acquired, released)."""
    timeline = sorted(
        (acquired, released, worker, asked)
        for worker, intervals in per_worker.items()
        for asked, acquired, released in intervals
    )
    gaps, overlaps, switches = [], 0, 0
    for previous, current in itertools.pairwise(timeline):
        if current[0] < previous[1]:
            overlaps += 1
        if current[2] != previous[2]:
            switches += 1
            gaps.append(current[0] - previous[1])
    waits = [acquired - asked for acquired, _released, _worker, asked in timeline]
    counts = {worker: len(intervals) for worker, intervals in sorted(per_worker.items())}
    total = sum(counts.values())
    squares = sum(c * c for c in counts.values())
    return {
        "acquisitions": total,
        "per_worker": counts,
        "switches": switches,
        "handoff_p50_ms": percentile(gaps, 0.5) * 1000 if gaps else None,
        "handoff_p99_ms": percentile(gaps, 0.99) * 1000 if gaps else None,
        "handoff_max_ms": max(gaps) * 1000 if gaps else None,
        "handoff_mean_ms": statistics.fmean(gaps) * 1000 if gaps else None,
        "longest_wait_ms": max(waits) * 1000 if waits else None,
        "jain": total * total / (len(counts) * squares) if squares else None,
        "overlaps": overlaps,
    }


class Command(BaseCommand):
    help = "Several processes take one lock in turn: live progress, then hand-off statistics."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workers", type=int, default=4)
        parser.add_argument("--seconds", type=float, default=10.0)
        parser.add_argument("--hold-ms", type=float, default=1.0, help="time inside the lock")
        parser.add_argument("--json", action="store_true", help="print the summary as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        workers, seconds = options["workers"], options["seconds"]
        if workers < 1 or seconds <= 0:
            raise CommandError("--workers must be >= 1 and --seconds > 0")
        context = multiprocessing.get_context("spawn")  # a fresh Django in each worker
        start, results = context.Event(), context.Queue()
        processes = [
            context.Process(
                target=_worker,
                args=(i, seconds, options["hold_ms"] / 1000, start, results),
                daemon=True,
            )
            for i in range(1, workers + 1)
        ]
        for process in processes:
            process.start()
        per_worker: dict[int, list[tuple[float, float, float]]] = {
            i: [] for i in range(1, workers + 1)
        }
        done: set[int] = set()
        if not options["json"]:
            self.stdout.write(
                f"{workers} processes on lock {LOCK_NAME!r} for {seconds:g} s "
                f"(hold {options['hold_ms']:g} ms)"
            )
        ready: set[int] = set()
        while len(ready) < workers:  # every worker has set Django up: start together
            try:
                index, _ready = results.get(timeout=60)
            except queue.Empty:
                raise CommandError("the workers did not start within 60 s") from None
            ready.add(index)
        start.set()
        began = time.monotonic()
        live = self.stdout.isatty() if hasattr(self.stdout, "isatty") else False
        last_print = 0.0
        try:
            while len(done) < workers:
                try:
                    index, batch = results.get(timeout=0.1)
                except queue.Empty:
                    if not any(p.is_alive() for p in processes) and results.empty():
                        raise CommandError("the workers exited without reporting") from None
                else:
                    if batch is None:
                        done.add(index)
                    else:
                        per_worker[index].extend(batch)
                now = time.monotonic()
                if not options["json"] and now - last_print >= (0.1 if live else 1.0):
                    last_print = now
                    self._progress(min(now - began, seconds), seconds, per_worker, live)
        finally:
            for process in processes:
                process.join(timeout=10)
                if process.is_alive():
                    process.kill()
        summary = summarize(per_worker)
        if options["json"]:
            self.stdout.write(json.dumps(summary, indent=2))
            return
        self._progress(seconds, seconds, per_worker, live)
        if live:
            self.stdout.write("")
        self.stdout.write(self._table(summary))

    def _progress(
        self, elapsed: float, seconds: float, per_worker: dict[int, list[Any]], live: bool
    ) -> None:
        width = 30
        filled = int(width * min(elapsed / seconds, 1.0))
        bar = "#" * filled + "-" * (width - filled)
        counts = " ".join(f"w{i}:{len(v)}" for i, v in sorted(per_worker.items()))
        line = f"[{bar}] {elapsed:4.1f}/{seconds:g}s  {counts}"
        if live:
            self.stdout.write("\r" + line, ending="")
            self.stdout.flush()
        else:
            self.stdout.write(line)

    def _table(self, s: dict[str, Any]) -> str:
        def ms(value: float | None) -> str:
            return "-" if value is None else f"{value:.3f} ms"

        total = s["acquisitions"] or 1
        lines = ["", "worker  acquisitions  share"]
        for worker, count in s["per_worker"].items():
            lines.append(f"w{worker:<6} {count:>12}  {100 * count / total:5.1f}%")
        lines += [
            f"{'total':<7} {s['acquisitions']:>12}",
            "",
            f"holder switches     {s['switches']}",
            f"hand-off p50        {ms(s['handoff_p50_ms'])}",
            f"hand-off p99        {ms(s['handoff_p99_ms'])}",
            f"hand-off max        {ms(s['handoff_max_ms'])}",
            f"longest wait        {ms(s['longest_wait_ms'])}",
            f"Jain fairness       {s['jain']:.3f}"
            if s["jain"] is not None
            else "Jain fairness       -",
            f"overlaps            {s['overlaps']}",
        ]
        style = self.style.SUCCESS if s["overlaps"] == 0 else self.style.ERROR
        lines.append(
            style(
                "OK: no two workers ever held the lock at once."
                if s["overlaps"] == 0
                else "OVERLAP: two workers held the lock at once!"
            )
        )
        return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it with: python demo_site/manage.py lock_contention")
