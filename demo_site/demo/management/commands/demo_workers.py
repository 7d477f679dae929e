"""``manage.py demo_workers --slot N``: a background worker that holds locks, like real jobs.

``make demo`` starts a few of these so the admin's Held locks page is not empty. Each
slot holds its locks in named threads for a while, releases them, and takes them again.
When an admin force-releases one, the worker notices (its watchdog finds the token gone,
or ``owned()`` turns false), says so on stderr, and takes the lock again a bit later.
"""

from __future__ import annotations

import contextlib
import random
import signal
import sys
import threading
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_redislock import Lock, LockNotOwned, RedisLockError

# slot -> (thread name, lock name, purpose, ttl, watchdog, hold seconds)
JOBS: dict[int, list[tuple[str, str, str, float, bool, float]]] = {
    1: [
        ("NightlySales", "report:nightly-sales", "manage.py nightly_sales", 15, True, 90),
        ("ImportWorker-2", "import:catalogue", "catalogue.importer.run", 300, False, 240),
    ],
    2: [
        ("CrmSync", "sync:crm-contacts", "crm.tasks.sync_contacts", 20, True, 120),
        ("Billing", "invoice:2024-00042", "billing.views.pay_invoice", 30, False, 25),
    ],
    3: [
        ("Backup", "backup:media", "ops.backup.media", 60, True, 180),
        ("Mailer", "mail:digest-weekly", "newsletter.tasks.send_digest", 45, True, 60),
    ],
}


#: Locks held right now, released when the worker is stopped.
HELD: set[Lock] = set()


def hold_forever(name: str, purpose: str, ttl: float, watchdog: bool, hold: float) -> None:
    """Take ``name``, hold it ``hold`` s (or until it is taken away), release, repeat."""
    while True:
        lock = Lock(name, ttl=ttl, watchdog=watchdog, purpose=purpose, timeout=None)
        try:
            lock.acquire()
            HELD.add(lock)
            until = time.monotonic() + hold * random.uniform(0.8, 1.2)
            while time.monotonic() < until:
                time.sleep(1.0)
                if lock.lost or not lock.owned():
                    print(
                        f"[demo worker] lost {name!r} (force-released?); retaking soon",
                        file=sys.stderr,
                        flush=True,
                    )
                    break
                if not watchdog and lock.remaining() is not None and lock.remaining() < ttl / 3:
                    lock.extend()
            HELD.discard(lock)
            with contextlib.suppress(LockNotOwned):
                lock.release()
        except RedisLockError as exc:
            print(f"[demo worker] {name!r}: {exc}", file=sys.stderr, flush=True)
        time.sleep(random.uniform(3, 6))


class Command(BaseCommand):
    help = "Hold a few locks in the background, as the demo's workers (started by make demo)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--slot", type=int, choices=sorted(JOBS), default=1)

    def handle(self, *args: Any, **options: Any) -> None:
        threads = [
            threading.Thread(target=hold_forever, args=job[1:], name=job[0], daemon=True)
            for job in JOBS[options["slot"]]
        ]
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        for thread in threads:
            thread.start()
        try:
            while True:
                time.sleep(3600)
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            for lock in list(HELD):  # leave nothing behind for the next run
                with contextlib.suppress(RedisLockError):
                    lock.release()
