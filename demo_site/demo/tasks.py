"""The demo's Celery app and its one task: a report that must not be built twice at once.

``make demo`` starts a worker (``celery -A demo_site.demo.tasks worker --pool threads -c 5``)
on the demo's Redis, which is also the result backend. Five slots, so that five enqueues
of the same report would all run at once, were it not for the lock.
"""

from __future__ import annotations

import time
from typing import Any

import django
from celery import Celery
from django.conf import settings

django.setup()  # a worker process imports this module first (no-op in the site)

from django_redislock.contrib.celery import LockedTask  # noqa: E402

app = Celery("demo")
app.conf.update(
    broker_url=settings.REDIS_URL,
    result_backend=settings.REDIS_URL,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_track_started=True,
    result_expires=3600,
)

BUILD_SECONDS = 3.0


@app.task(
    bind=True,
    base=LockedTask,
    lock={"name": "celery-report:{report}", "on_busy": "skip", "ttl": 10},
)
def build_report(self: Any, report: str) -> dict[str, Any]:
    """Build the report (it takes a few seconds); one run at a time per report."""
    started = time.time()
    time.sleep(BUILD_SECONDS)
    return {"report": report, "fence": self.held_lock.fence, "started": started}
