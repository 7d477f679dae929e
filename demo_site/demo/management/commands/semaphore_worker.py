"""``manage.py semaphore_worker --label worker-1``: one of the Semaphore page's 8 workers.

The page starts eight; each loops: wait in line for one of 3 permits of
``Semaphore("demo:pdf-exports", 3)``, "export a PDF" for 1-3 s while holding it, give it
back. Its files live in ``var/semaphore/`` (see ``demo.page_workers``).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_redislock import Semaphore

from ...page_workers import log_event, set_state, start, worker_dir

SEMAPHORE = "demo:pdf-exports"
LIMIT = 3
TTL = 4.0


def semaphore_dir() -> Path:
    return worker_dir("semaphore")


class Command(BaseCommand):
    help = "One worker of the demo's Semaphore page (started by the page)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--label", required=True)
        parser.add_argument("--minutes", type=float, default=10.0)

    def handle(self, *args: Any, **options: Any) -> None:
        label, here = options["label"], semaphore_dir()
        start(here, label, options["minutes"])
        while True:
            set_state(here, label, "waiting")
            permit = Semaphore(SEMAPHORE, LIMIT, ttl=TTL, watchdog=True, purpose=label)
            if not permit.acquire(timeout=30):
                continue
            set_state(here, label, f"holding fence {permit.fence}")
            log_event(here, label, f"took a permit (fence {permit.fence})")
            time.sleep(random.uniform(1.0, 3.0))  # the export's work
            permit.release()
            log_event(here, label, "gave its permit back")
            set_state(here, label, "resting")
            time.sleep(random.uniform(0.2, 0.6))
