"""``manage.py freeze_demo``: freeze a lock holder past its TTL, see the fence stop it.

1. worker A takes the lock ``ledger`` (TTL 2 s), reads, checks, and stops before writing;
2. the demo freezes A with ``SIGSTOP``;
3. A's lock expires; worker B takes it (a higher fence) and writes;
4. A is resumed with ``SIGCONT`` and writes with its old fence: ``StaleFence``.

Each step is a ``DemoEvent`` of the run, shown by the page ``/fencing/``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

MANAGE = Path(__file__).resolve().parents[3] / "manage.py"


class Command(BaseCommand):
    help = "Freeze a lock holder past its TTL and show its stale write rejected by the fence."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", default=None, help="run id (default: a new one)")
        parser.add_argument("--ttl", type=float, default=2.0)
        parser.add_argument("--watchdog", action="store_true", help="worker A uses a watchdog")

    def handle(self, *args: Any, **options: Any) -> None:
        from demo_site.demo.models import DemoEvent, Ledger

        run = options["run"] or uuid.uuid4().hex[:12]
        ttl = options["ttl"]

        def event(text: str, kind: str = "info") -> None:
            DemoEvent.objects.create(run=run, actor="demo", kind=kind, text=text)
            self.stdout.write(f"[demo] {text}")

        def worker(name: str, add: int, *extra: str) -> subprocess.Popen[str]:
            argv = [sys.executable, str(MANAGE), "fence_worker", "--run", run]
            argv += ["--worker", name, "--add", str(add), "--ttl", str(ttl), *extra]
            return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

        # A fresh ledger row per run: balance 100, no fence yet.
        Ledger.objects.update_or_create(
            name=f"run:{run}", defaults={"balance": 100, "fence": 0, "written_by": ""}
        )
        event(f"starting worker A (TTL {ttl:g} s{', watchdog on' if options['watchdog'] else ''})")
        a = worker(
            "A", 100, "--pause-before-write", *(["--watchdog"] if options["watchdog"] else [])
        )
        b = None
        try:
            assert a.stdout is not None and a.stdin is not None
            line = a.stdout.readline()
            if line.strip() != "checked":
                raise CommandError(f"worker A did not get ready (said {line!r})")
            os.kill(a.pid, signal.SIGSTOP)
            frozen_at = time.monotonic()
            event(
                f"SIGSTOP worker A (pid {a.pid}): frozen between its check and its write, "
                "like a long GC pause. Its TTL keeps running in Redis.",
                "freeze",
            )
            event("starting worker B: it waits for the lock")
            b = worker("B", 50)
            b.communicate(timeout=60)
            frozen = time.monotonic() - frozen_at
            event(
                f"SIGCONT worker A after {frozen:.1f} s frozen: it carries on where it stopped",
                "freeze",
            )
            os.kill(a.pid, signal.SIGCONT)
            a.stdin.write("go\n")
            a.stdin.flush()
            a.communicate(timeout=60)
            ledger = Ledger.objects.get(name=f"run:{run}")
            if ledger.balance == 150 and "worker B" in ledger.written_by:
                verdict = (
                    "B's +50 survived (100 + 50). Without the fence, A's late write of 200 "
                    "(100 + 100, computed before B wrote) would have replaced it"
                )
            else:
                verdict = "unexpected: see the lines above"
            event(
                f"done: balance {ledger.balance}, fence {ledger.fence}, written by "
                f"{ledger.written_by or 'nobody'}. {verdict}.",
                "done",
            )
        except BaseException as exc:
            for process in (a, b):
                if process is not None and process.poll() is None:
                    os.kill(process.pid, signal.SIGCONT)
                    process.kill()
            DemoEvent.objects.create(run=run, actor="demo", kind="done", text=f"failed: {exc!r}")
            raise
