"""``manage.py rebuild_reports``: a cron job that must not overlap itself.

``@lock_command(on_busy="skip")``: when the previous run still holds the lock, this run
prints a notice and exits with status 0 (cron stays quiet). The watchdog keeps the
lock alive however long the rebuild takes; if this process dies, the lock expires
within ``ttl`` seconds.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.utils import timezone

from django_redislock import lock_command


class Command(BaseCommand):
    help = "Rebuild the demo's reports (one run at a time; an overlapping run skips)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--seconds", type=float, default=5.0, help="how long it takes")

    @lock_command(on_busy="skip", ttl=10, watchdog=True)
    def handle(self, *args: Any, **options: Any) -> None:
        from demo_site.demo.models import Report

        seconds = options["seconds"]
        self.stdout.write(f"pid {os.getpid()}: rebuilding reports ({seconds:g} s)...")
        started = time.monotonic()
        time.sleep(seconds)
        report, _ = Report.objects.get_or_create(name="nightly")
        report.generated_at = timezone.now()
        report.generated_by = f"manage.py rebuild_reports (pid {os.getpid()})"
        report.seconds = time.monotonic() - started
        report.runs += 1
        report.save()
        self.stdout.write(self.style.SUCCESS(f"pid {os.getpid()}: reports rebuilt."))
