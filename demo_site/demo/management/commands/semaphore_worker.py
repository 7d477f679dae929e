"""``manage.py semaphore_worker --label worker-1``: one of the Semaphore page's 8 workers.

The page starts eight; each loops: wait in line for one of 3 permits of
``Semaphore("demo:pdf-exports", 3)``, "export a PDF" for 1-3 s while holding it, give it
back. It writes its pid to ``var/semaphore/<label>.pid``, what it is doing to
``<label>.state`` and one line per event to ``events.log``. It exits when the process
that started it is gone, or after ``--minutes``.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from django_redislock import Semaphore

SEMAPHORE = "demo:pdf-exports"
LIMIT = 3
TTL = 4.0


def semaphore_dir() -> Path:
    path = Path(settings.VAR_DIR) / "semaphore"
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_event(label: str, text: str) -> None:
    with open(semaphore_dir() / "events.log", "a") as log:
        log.write(f"{time.time():.3f} {label} {text}\n")


def set_state(label: str, state: str) -> None:
    (semaphore_dir() / f"{label}.state").write_text(f"{time.time():.3f} {state}")


def _exit_with(parent: int, stop_at: float) -> None:
    while os.getppid() == parent and time.monotonic() < stop_at:
        time.sleep(0.5)
    os._exit(0)


class Command(BaseCommand):
    help = "One worker of the demo's Semaphore page (started by the page)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--label", required=True)
        parser.add_argument("--minutes", type=float, default=10.0)

    def handle(self, *args: Any, **options: Any) -> None:
        label = options["label"]
        parent = os.getppid()
        stop_at = time.monotonic() + options["minutes"] * 60
        (semaphore_dir() / f"{label}.pid").write_text(str(os.getpid()))
        # Gone with the demo even while waiting in line (an acquire may wait 30 s).
        threading.Thread(target=_exit_with, args=(parent, stop_at), daemon=True).start()
        while True:
            set_state(label, "waiting")
            permit = Semaphore(SEMAPHORE, LIMIT, ttl=TTL, watchdog=True, purpose=label)
            if not permit.acquire(timeout=30):
                continue
            set_state(label, f"holding fence {permit.fence}")
            log_event(label, f"took a permit (fence {permit.fence})")
            time.sleep(random.uniform(1.0, 3.0))  # the export's work
            permit.release()
            log_event(label, "gave its permit back")
            set_state(label, "resting")
            time.sleep(random.uniform(0.2, 0.6))
