"""The admin's Hot locks page: lock families ranked by the total time spent waiting for
them over a window, with acquisitions, p50/p99 wait and hold, timeouts and losses, worked
out from the history (``REDISLOCK["HISTORY"]``)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone

from ..conf import get_config
from ..exceptions import RedisLockError
from ..history import LockEvent, lock_history
from ..hot import FamilyStats, hot_families, percentile, seconds_text
from .base import LockAdminBase

#: The windows offered, by their query value.
WINDOWS = {
    "15m": dt.timedelta(minutes=15),
    "1h": dt.timedelta(hours=1),
    "24h": dt.timedelta(days=1),
}
DEFAULT_WINDOW = "1h"


class HotViews(LockAdminBase):
    """The Hot locks page."""

    hot_template = "admin/django_redislock/heldlock_hot.html"
    #: Events read at most for the page (the newest): a full default stream is 10,000.
    hot_events = 50_000

    def hot_urls(self, prefix: str) -> list[URLPattern]:
        """The Hot locks page's URL pattern."""
        wrap = self.admin_site.admin_view
        return [path("hot/", wrap(self.hot_view), name=f"{prefix}_hot")]

    def hot_view(self, request: HttpRequest) -> HttpResponse:
        self._check_view(request)
        alias = self._alias(request)
        window = request.GET.get("window", DEFAULT_WINDOW)
        if window not in WINDOWS:
            window = DEFAULT_WINDOW
        rows: list[dict[str, Any]] = []
        error = None
        recorded: list[LockEvent] = []
        if get_config()["HISTORY"]:
            try:
                recorded = lock_history(
                    connection=alias,
                    since=timezone.now() - WINDOWS[window],
                    limit=self.hot_events,
                )
            except RedisLockError as exc:
                error = str(exc)
        for stats in hot_families(recorded):
            rows.append(
                {
                    "stats": stats,
                    "total_wait": seconds_text(stats.total_wait),
                    "wait_p50": seconds_text(stats.wait(0.5)),
                    "wait_p99": seconds_text(stats.wait(0.99)),
                    "hold_p50": seconds_text(stats.hold(0.5)),
                    "hold_p99": seconds_text(stats.hold(0.99)),
                }
            )
        context = self._context(
            request,
            "Hot locks",
            rows=rows,
            events=len(recorded),
            truncated=len(recorded) >= self.hot_events,
            window=window,
            windows=list(WINDOWS),
            history_on=get_config()["HISTORY"],
            error=error,
            alias=alias,
        )
        return TemplateResponse(request, self.hot_template, context)


__all__ = ["FamilyStats", "HotViews", "hot_families", "percentile", "seconds_text"]
