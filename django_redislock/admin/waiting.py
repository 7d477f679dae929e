"""The admin's Waiting page: every waiter of every held lock, longest waiting first, with
what blocks it (the lock's holders). Read live: one SCAN for the keys where waiters are
recorded (a lock's claim and line, a semaphore's or read-write lock's waiting records),
then the holders and waiters of those locks only."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone

from ..admin_listing import CONNECTION_VAR
from ..exceptions import RedisLockError
from ..inspection import waited_locks
from .base import LockAdminBase
from .formatting import format_moment


def waited_text(since: dt.datetime, now: dt.datetime) -> str:
    """How long it has waited: ``4.2 s``, ``3 min 20 s``, ``2 h 5 min``."""
    seconds = max(0.0, (now - since).total_seconds())
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


class WaitingViews(LockAdminBase):
    """The Waiting page."""

    waiting_template = "admin/django_redislock/heldlock_waiting.html"
    #: Waiters shown at most (the longest waiting).
    waiting_limit = 500

    def waiting_urls(self, prefix: str) -> list[URLPattern]:
        """The Waiting page's URL pattern."""
        wrap = self.admin_site.admin_view
        return [path("waiting/", wrap(self.waiting_view), name=f"{prefix}_waiting")]

    def waiting_view(self, request: HttpRequest) -> HttpResponse:
        self._check_view(request)
        alias = self._alias(request)
        rows: list[dict[str, Any]] = []
        error = None
        try:
            infos = waited_locks(connection=alias)
        except RedisLockError as exc:
            infos, error = [], str(exc)
        now = timezone.now()
        for info in infos:
            detail_url = self._lock_url("change", info, alias)
            blockers = [
                f"{holder.owner}{f' ({holder.purpose})' if holder.purpose else ''}"
                for holder in info.holders
            ]
            for waiter in info.waiters:
                rows.append(
                    {
                        "waiter": waiter,
                        "info": info,
                        "detail_url": detail_url,
                        "since": format_moment(waiter.waiting_since),
                        "waited": waited_text(waiter.waiting_since, now),
                        "blocked_by": blockers,
                    }
                )
        rows.sort(key=lambda row: row["waiter"].waiting_since)
        context = self._context(
            request,
            "Waiting for locks",
            rows=rows[: self.waiting_limit],
            total=len(rows),
            locks=len(infos),
            error=error,
            alias=alias,
            aliases=self.connection_aliases(),
            connection_var=CONNECTION_VAR,
        )
        return TemplateResponse(request, self.waiting_template, context)


__all__ = ["WaitingViews", "waited_text"]
