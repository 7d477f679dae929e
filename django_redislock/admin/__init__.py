"""The admin pages of held locks, read live from Redis: the list, a lock's page, who
waits, and force-release.

``HeldLock`` is an unmanaged placeholder model (see ``models.py``); this
``ModelAdmin`` replaces every view with its own, built on
``self.admin_site.admin_view`` and ``self.admin_site.each_context(request)`` so it
works on any ``AdminSite``. Every view checks the model permission itself:
``view_heldlock`` to list and inspect, ``release_heldlock`` to force-release
(:mod:`.release`). One module per page: :mod:`.waiting` lists every waiter, :mod:`.hot`
ranks the lock families by how long they are waited for.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.text import capfirst

from ..admin_listing import CONNECTION_VAR, SEARCH_VAR, ListQuery
from ..conf import get_config
from ..exceptions import RedisLockError
from ..history import lock_history
from ..inspection import LockInfo, scan_page, search_pattern
from ..models import HeldLock
from . import timeline
from .base import HOLDER_VAR, LockAdminBase
from .formatting import format_moment, format_ttl, holder_fields, lock_fields
from .hot import HotViews
from .release import ACTION_NAME, ReleaseViews
from .waiting import WaitingViews


class HeldLockAdmin(ReleaseViews, WaitingViews, HotViews, LockAdminBase):
    """Held locks, read live from Redis; nothing here touches the database table."""

    # -- URLs ----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        # Only our own views: the default ones would query the (absent) table.
        # Names are quoted (admin.utils.quote), so "/" in a name is "_2F".
        return [
            path("", wrap(self.changelist_view), name=f"{prefix}_changelist"),
            *self.waiting_urls(prefix),
            *self.hot_urls(prefix),
            *self.release_urls(prefix),
            path("<str:object_id>/change/", wrap(self.detail_view), name=f"{prefix}_change"),
        ]

    # -- change list ---------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        self._check_view(request)
        alias = self._alias(request)
        if request.method == "POST":
            return self._changelist_action(request, alias)
        aliases = self.connection_aliases()
        listing = ListQuery.from_request(request, alias if len(aliases) > 1 else "")
        infos: list[LockInfo] = []
        next_cursor = error = None
        try:
            infos, next_cursor = scan_page(
                search_pattern(listing.query),
                listing.cursor,
                self.list_per_page,
                alias,
                max_seconds=self.scan_time_budget,
            )
        except (ValueError, RedisLockError) as exc:  # a bad cursor typed into the URL too
            error = str(exc)
        listing.sort(infos)
        context = self._context(
            request,
            capfirst(str(self.opts.verbose_name_plural)),
            rows=[self._row(info, alias) for info in infos],
            query=listing.query,
            order=listing.order,
            headers=listing.headers(),
            page_number=listing.page_number,
            is_first_page=listing.cursor is None,
            next_url=listing.next_url(next_cursor),
            first_url=listing.link(),
            scan_complete=next_cursor is None,
            error=error,
            alias=alias,
            aliases=aliases,
            search_var=SEARCH_VAR,
            connection_var=CONNECTION_VAR,
            action_name=ACTION_NAME,
            auto_refresh_seconds=self.auto_refresh_seconds,
            list_per_page=self.list_per_page,
            **(extra_context or {}),
        )
        return TemplateResponse(request, self.change_list_template, context)

    # -- detail ----------------------------------------------------------------

    def detail_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        self._check_view(request)
        alias = self._alias(request)
        name = self._name(object_id)
        info = self._held(request, name, alias, "is not held (released or expired)")
        if isinstance(info, HttpResponse):
            return info
        context = self._context(
            request,
            f"Held lock “{name}”",
            object_name=name,
            row=self._row(info, alias),
            info=info,
            alias=alias,
            history=self._history(name),
            **self._recorded(name, alias),
        )
        return TemplateResponse(request, self.detail_template, context)

    #: The window of a lock page's timeline, and the events it reads at most.
    timeline_window = dt.timedelta(hours=1)
    timeline_events = 5_000
    #: Recent events listed under the timeline.
    recent_events = 20

    def _recorded(self, name: str, alias: str) -> dict[str, Any]:
        """The lock's recent events and its timeline, when the history is on."""
        if not get_config()["HISTORY"]:
            return {"history_on": False}
        end = timezone.now()
        try:
            recorded = lock_history(
                name, connection=alias, since=end - self.timeline_window, limit=self.timeline_events
            )
        except RedisLockError as exc:
            return {"history_on": True, "history_error": str(exc)}
        return {
            "history_on": True,
            "recent": [
                {"event": event, "at": format_moment(event.at)}
                for event in recorded[: self.recent_events]
            ],
            "timeline": timeline.render(timeline.build(recorded, end - self.timeline_window, end)),
        }

    def _history(self, name: str) -> list[LogEntry]:
        content_type = ContentType.objects.get_for_model(HeldLock, for_concrete_model=False)
        return list(
            LogEntry.objects.filter(content_type=content_type, object_id=name)
            .select_related("user")
            .order_by("-action_time")[:10]
        )


admin.site.register(HeldLock, HeldLockAdmin)

__all__ = [
    "ACTION_NAME",
    "HOLDER_VAR",
    "HeldLockAdmin",
    "format_moment",
    "format_ttl",
    "holder_fields",
    "lock_fields",
]
