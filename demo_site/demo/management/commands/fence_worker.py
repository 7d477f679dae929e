"""``manage.py fence_worker``: one worker of the freeze demo (see ``freeze_demo``).

Takes the ``ledger`` lock, reads the balance, adds ``--add``, checks it still holds the
lock, then (with ``--pause-before-write``) prints ``checked`` and waits for a line on
stdin: the moment the demo freezes it. Then it writes with ``fenced_update``, which
rejects the write when a newer holder has written meanwhile.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_redislock import Lock, LockLost, LockNotOwned, StaleFence
from django_redislock.fencing import fenced_update


class Command(BaseCommand):
    help = "One worker of the fencing demo (started by freeze_demo)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", required=True)
        parser.add_argument("--worker", required=True)
        parser.add_argument("--add", type=int, default=100)
        parser.add_argument("--ttl", type=float, default=2.0)
        parser.add_argument("--timeout", type=float, default=30.0)
        parser.add_argument("--watchdog", action="store_true")
        parser.add_argument("--pause-before-write", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        from demo_site.demo.models import DemoEvent, Ledger

        run, me = options["run"], f"worker {options['worker']} (pid {os.getpid()})"

        def event(text: str, kind: str = "info") -> None:
            DemoEvent.objects.create(run=run, actor=me, kind=kind, text=text)

        lock_name = f"ledger:{run}"  # one lock per run: two visitors' runs do not mix
        lock = Lock(
            lock_name,
            ttl=options["ttl"],
            timeout=options["timeout"],
            watchdog=options["watchdog"],
            purpose=f"fencing demo, worker {options['worker']}",
        )
        try:
            with lock:
                watchdog = "with a watchdog" if options["watchdog"] else "no watchdog"
                event(f"acquired “{lock_name}”: fence {lock.fence}, TTL {lock.ttl:g} s, {watchdog}")
                row = Ledger.objects.get(name=f"run:{run}")
                new_balance = row.balance + options["add"]
                event(f"read balance {row.balance}; will write {new_balance}")
                lock.check()
                if options["pause_before_write"]:
                    event("lock.check() passed; about to write…")
                    print("checked", flush=True)
                    sys.stdin.readline()  # frozen here by the demo (SIGSTOP)
                try:
                    fenced_update(
                        Ledger.objects.filter(pk=row.pk),
                        lock,
                        balance=new_balance,
                        written_by=me,
                    )
                except StaleFence as exc:
                    event(f"write REJECTED by the fence: {exc}", "stale")
                else:
                    event(f"wrote balance {new_balance} with fence {lock.fence}", "ok")
        except (LockLost, LockNotOwned) as exc:
            event(f"leaving the lock: {type(exc).__name__}: {exc}", "stale")
        except Exception as exc:
            event(f"failed: {type(exc).__name__}: {exc}", "stale")
            raise
