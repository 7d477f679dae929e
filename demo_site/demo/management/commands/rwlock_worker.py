"""``manage.py rwlock_worker --label reader-1 --role read``: one of the Read-write lock
page's workers.

Readers loop: read ``ReadWriteLock("demo:price-list")`` for 0.5-1.5 s, rest 0.1-0.3 s
(five of them overlap all the time). The writer loops: rebuild the price list (write) for
1 s, rest 3-5 s, and logs how long it waited while the readers streamed on. Its files
live in ``var/rwlock/`` (see ``demo.page_workers``).
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_redislock import ReadWriteLock

from ...page_workers import log_event, set_state, start, worker_dir

PRICE_LIST = "demo:price-list"
TTL = 4.0


def rwlock_dir() -> Path:
    return worker_dir("rwlock")


class Command(BaseCommand):
    help = "One worker of the demo's Read-write lock page (started by the page)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--label", required=True)
        parser.add_argument("--role", choices=["read", "write"], required=True)
        parser.add_argument("--minutes", type=float, default=10.0)

    def handle(self, *args: Any, **options: Any) -> None:
        label, role, here = options["label"], options["role"], rwlock_dir()
        start(here, label, options["minutes"])
        prices = ReadWriteLock(PRICE_LIST, ttl=TTL, watchdog=True, timeout=30, purpose=label)
        while True:
            set_state(here, label, "waiting")
            lock = prices.read_lock() if role == "read" else prices.write_lock()
            asked = time.monotonic()
            if not lock.acquire():
                continue
            waited = time.monotonic() - asked
            if role == "read":
                set_state(here, label, f"reading fence {lock.fence}")
                time.sleep(random.uniform(0.5, 1.5))  # reading the price list
                lock.release()
                set_state(here, label, "resting")
                time.sleep(random.uniform(0.1, 0.3))
            else:
                set_state(here, label, f"writing fence {lock.fence}")
                log_event(
                    here, label, f"rebuilding (fence {lock.fence}) after waiting {waited:.2f} s"
                )
                time.sleep(1.0)  # rebuilding it, alone
                lock.release()
                log_event(here, label, "rebuilt the price list")
                set_state(here, label, "resting")
                time.sleep(random.uniform(3.0, 5.0))
