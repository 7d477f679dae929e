"""What every page of the held-locks admin shares: permissions, URLs, the connection
chosen, the context, and a lock as a row (:class:`LockAdminBase`)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.admin.utils import quote, unquote
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from ..admin_listing import CONNECTION_VAR
from ..conf import get_config
from ..exceptions import InvalidLockName, RedisLockError
from ..inspection import LockInfo, lock_info
from ..keys import validate_name
from .formatting import (
    format_moment,
    format_ttl,
    holder_fields,
    lock_fields,
    waiter_fields,
    with_query,
)

#: The release page's parameter naming one holder (its token's first characters).
HOLDER_VAR = "holder"


class LockAdminBase(admin.ModelAdmin):
    """Held locks, read live from Redis; nothing here touches the database table."""

    #: Locks per page (a page is whole SCAN batches, so it may hold a few more).
    list_per_page = 100
    #: Seconds one page may spend scanning before it shows what it found so far
    #: with a link to continue (a sparse search over millions of keys).
    scan_time_budget = 2.0
    #: Seconds between reloads when the user turns auto-refresh on (off by
    #: default; ``None`` hides the switch).
    auto_refresh_seconds: int | None = 10

    change_list_template = "admin/django_redislock/heldlock_change_list.html"
    detail_template = "admin/django_redislock/heldlock_detail.html"
    release_confirmation_template = "admin/django_redislock/heldlock_release_confirmation.html"
    release_selected_confirmation_template = (
        "admin/django_redislock/heldlock_release_selected_confirmation.html"
    )

    # -- permissions ---------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_release_permission(self, request: HttpRequest) -> bool:
        opts = self.opts
        codename = get_permission_codename("release", opts)
        return request.user.has_perm(f"{opts.app_label}.{codename}")

    def _check_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def _check_release(self, request: HttpRequest) -> None:
        if not (self.has_view_permission(request) and self.has_release_permission(request)):
            raise PermissionDenied

    def _url(self, view: str, *args: Any, query: dict[str, Any] | None = None) -> str:
        opts = self.opts
        url = reverse(
            f"admin:{opts.app_label}_{opts.model_name}_{view}",
            args=args,
            current_app=self.admin_site.name,
        )
        query = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        return f"{url}?{urlencode(query)}" if query else url

    def _lock_url(self, view: str, info_or_name: Any, alias: str) -> str:
        name = getattr(info_or_name, "name", info_or_name)
        query = {CONNECTION_VAR: alias} if alias != self._default_alias() else None
        return self._url(view, quote(name), query=query)

    # -- connections ---------------------------------------------------------

    def _default_alias(self) -> str:
        return get_config()["CONNECTION"]

    def connection_aliases(self) -> list[str]:
        """The aliases the page can inspect: the lock connection and the Redlock nodes."""
        config = get_config()
        aliases = [config["CONNECTION"], *config.get("REDLOCK_CONNECTIONS", [])]
        return list(dict.fromkeys(aliases))

    def _alias(self, request: HttpRequest) -> str:
        alias = request.GET.get(CONNECTION_VAR) or request.POST.get(CONNECTION_VAR)
        if not alias:
            return self._default_alias()
        if alias not in self.connection_aliases():
            raise Http404(f"Unknown lock connection {alias!r}")
        return alias

    def _name(self, object_id: str) -> str:
        try:
            return validate_name(unquote(object_id))
        except InvalidLockName as exc:
            raise Http404(str(exc)) from None

    # -- context -------------------------------------------------------------
    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "title": title,
            "subtitle": None,
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "has_view_permission": self.has_view_permission(request),
            "has_release_permission": self.has_release_permission(request),
            "changelist_url": self._url("changelist"),
            "waiting_url": self._url("waiting"),
            "hot_url": self._url("hot"),
            **extra,
        }

    def _row(self, info: LockInfo, alias: str) -> dict[str, Any]:
        release_url = self._lock_url("release", info, alias)
        several = len(info.holders) > 1
        return {
            "info": info,
            "ttl": format_ttl(info.ttl),
            "acquired_at": format_moment(info.acquired_at),
            "fields": lock_fields(info, alias),
            "more_holders": len(info.holders) - 1,
            "holders": [
                {
                    "holder": holder,
                    "ttl": format_ttl(holder.ttl),
                    "fields": holder_fields(holder),
                    "heading": f"Holder {number} of {len(info.holders)}" if several else "Holder",
                    # Names the holder by its token's first characters, never the whole token.
                    "release_url": with_query(release_url, {HOLDER_VAR: holder.token[:6]}),
                }
                for number, holder in enumerate(info.holders, 1)
            ],
            "waiters": [
                {
                    "waiter": waiter,
                    "fields": waiter_fields(waiter),
                    "since": format_moment(waiter.waiting_since),
                }
                for waiter in info.waiters
            ],
            "detail_url": self._lock_url("change", info, alias),
            "release_url": release_url,
        }

    def _held(
        self, request: HttpRequest, name: str, alias: str, not_held: str
    ) -> LockInfo | HttpResponse:
        """The lock's holder, or a redirect to the list with a message saying why not."""
        try:
            info = lock_info(name, connection=alias)
        except RedisLockError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(self._url("changelist"))
        if info is None:
            self.message_user(request, f"Lock “{name}” {not_held}.", messages.WARNING)
            return HttpResponseRedirect(self._url("changelist"))
        return info


__all__ = ["HOLDER_VAR", "LockAdminBase"]
