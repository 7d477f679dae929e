"""The admin page of held locks: list, inspect and force-release, read live from Redis.

``HeldLock`` is an unmanaged placeholder model (see ``models.py``); this
``ModelAdmin`` replaces every view with its own, built on
``self.admin_site.admin_view`` and ``self.admin_site.each_context(request)`` so it
works on any ``AdminSite``. Every view checks the model permission itself:
``view_heldlock`` to list and inspect, ``release_heldlock`` to force-release.
Force-release is a GET confirmation page showing the holder, then a
CSRF-protected POST that carries that holder's token, so a lock taken by someone
else since the page loaded is left alone. Each release writes a ``LogEntry`` and
sends ``lock_force_released``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.auth import get_permission_codename
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import formats, timezone
from django.utils.text import capfirst
from django.utils.timesince import timesince

from .admin_listing import CONNECTION_VAR, SEARCH_VAR, ListQuery
from .conf import get_config
from .exceptions import InvalidLockName, RedisLockError
from .inspection import (
    CHANGED_HANDS,
    RELEASED,
    LockHolder,
    LockInfo,
    ReleaseResult,
    force_release_holder,
    lock_info,
    scan_page,
    search_pattern,
)
from .keys import validate_name
from .models import HeldLock

ACTION_NAME = "release_selected"
#: The release page's parameter naming one holder (its token's first characters).
HOLDER_VAR = "holder"


def _with_query(url: str, query: dict[str, str]) -> str:
    return f"{url}{'&' if '?' in url else '?'}{urlencode(query)}"


def format_ttl(seconds: float | None) -> str:
    """A TTL for people: ``12.3 s``, ``4 min 5 s``, ``2 h 30 min``."""
    if seconds is None:
        return "no TTL"
    if seconds < 60:
        return f"{seconds:.1f} s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def format_moment(moment: dt.datetime | None) -> str:
    """An aware datetime in the current time zone, localized, with how long ago."""
    if moment is None:
        return "—"
    local = timezone.localtime(moment) if settings.USE_TZ else moment
    return f"{formats.localize(local)} ({timesince(moment)} ago)"


def lock_fields(info: LockInfo, alias: str) -> list[tuple[str, str]]:
    """(label, text) pairs describing a held lock as a whole."""
    return [
        ("Name", info.name),
        ("Kind", info.kind),
        ("Holders", info.holders_text),
        ("Redis key", info.key),
        ("Connection", alias),
    ]


def holder_fields(holder: LockHolder) -> list[tuple[str, str]]:
    """(label, text) pairs describing one holder, for the detail and confirmation pages."""
    return [
        ("Purpose", holder.purpose or "—"),
        ("Host", holder.host or "—"),
        ("Process ID", "—" if holder.pid is None else str(holder.pid)),
        ("Thread", holder.thread or "—"),
        ("TTL left", format_ttl(holder.ttl)),
        ("Acquired at", format_moment(holder.acquired_at)),
        ("Fence", "—" if holder.fence is None else str(holder.fence)),
        ("Watchdog", "on (renewed while the holder runs)" if holder.watchdog else "off"),
        ("Token", holder.short_token),
    ]


class HeldLockAdmin(admin.ModelAdmin):
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

    # -- URLs ----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        # Only our own views: the default ones would query the (absent) table.
        # Names are quoted (admin.utils.quote), so "/" in a name is "_2F".
        return [
            path("", wrap(self.changelist_view), name=f"{prefix}_changelist"),
            path(
                "release/",
                wrap(self.release_selected_view),
                name=f"{prefix}_release_selected",
            ),
            path(
                "<str:object_id>/release/",
                wrap(self.release_view),
                name=f"{prefix}_release",
            ),
            path("<str:object_id>/change/", wrap(self.detail_view), name=f"{prefix}_change"),
        ]

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
                    "release_url": _with_query(release_url, {HOLDER_VAR: holder.token[:6]}),
                }
                for number, holder in enumerate(info.holders, 1)
            ],
            "detail_url": self._lock_url("change", info, alias),
            "release_url": release_url,
        }

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

    def _changelist_action(self, request: HttpRequest, alias: str) -> HttpResponse:
        """The actions bar: "Force-release selected held locks" -> confirmation page."""
        self._check_release(request)
        back = request.get_full_path()
        if request.POST.get("action") != ACTION_NAME:
            self.message_user(request, "No action selected.", messages.WARNING)
            return HttpResponseRedirect(back)
        names = request.POST.getlist(ACTION_CHECKBOX_NAME)
        if not names:
            self.message_user(
                request,
                "Items must be selected in order to perform actions on them. "
                "No items have been changed.",
                messages.WARNING,
            )
            return HttpResponseRedirect(back)
        held: list[LockInfo] = []
        gone: list[str] = []
        try:
            for name in dict.fromkeys(names):
                info = lock_info(self._name(quote(name)), connection=alias)
                if info is None:
                    gone.append(name)
                else:
                    held.append(info)
        except RedisLockError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(back)
        context = self._context(
            request,
            "Are you sure?",
            rows=[self._row(info, alias) for info in held],
            gone=gone,
            alias=alias,
            connection_var=CONNECTION_VAR,
            form_url=self._url("release_selected"),
            back_url=back,
        )
        return TemplateResponse(request, self.release_selected_confirmation_template, context)

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
        )
        return TemplateResponse(request, self.detail_template, context)

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

    def _history(self, name: str) -> list[LogEntry]:
        content_type = ContentType.objects.get_for_model(HeldLock, for_concrete_model=False)
        return list(
            LogEntry.objects.filter(content_type=content_type, object_id=name)
            .select_related("user")
            .order_by("-action_time")[:10]
        )

    # -- force-release ---------------------------------------------------------

    def release_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """GET: confirmation page showing the holder. POST: release that holder only."""
        self._check_release(request)
        alias = self._alias(request)
        name = self._name(object_id)
        if request.method == "POST":
            tokens = request.POST.getlist("token") or [""]
            quiet = len(tokens) > 1
            results = [self._release(request, name, t, alias, quiet=quiet) for t in tokens]
            done = sum(1 for r in results if r is not None and r.released)
            if quiet and done:
                self.message_user(
                    request,
                    f"{done} holder{pluralize(done)} of lock “{name}” force-released.",
                    messages.SUCCESS,
                )
            if any(r is not None and r.status == CHANGED_HANDS and r.info for r in results):
                return HttpResponseRedirect(self._lock_url("change", name, alias))
            return HttpResponseRedirect(self._url("changelist"))
        info = self._held(request, name, alias, "is not held; nothing to release")
        if isinstance(info, HttpResponse):
            return info
        row = self._row(info, alias)
        chosen = request.GET.get(HOLDER_VAR, "")
        if chosen:
            row["holders"] = [h for h in row["holders"] if h["holder"].token.startswith(chosen)]
            if len(chosen) < 6 or not row["holders"]:
                self.message_user(
                    request,
                    f"That holder of lock “{name}” holds it no more; nothing to release.",
                    messages.WARNING,
                )
                return HttpResponseRedirect(self._lock_url("change", name, alias))
        context = self._context(
            request,
            "Are you sure?",
            object_name=name,
            row=row,
            info=info,
            alias=alias,
            connection_var=CONNECTION_VAR,
        )
        return TemplateResponse(request, self.release_confirmation_template, context)

    def release_selected_view(self, request: HttpRequest) -> HttpResponse:
        """POST from the bulk confirmation page: release each holder shown there."""
        self._check_release(request)
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        alias = self._alias(request)
        pairs = self._pairs(request)
        if not pairs:
            self.message_user(request, "No locks were selected.", messages.WARNING)
            return HttpResponseRedirect(self._url("changelist"))
        names = set()
        for raw_name, token in pairs:  # one pair per holder shown
            try:
                name = validate_name(raw_name)
            except InvalidLockName:
                continue
            result = self._release(request, name, token, alias, quiet=True)
            if result and result.released:
                names.add(name)
        released = len(names)
        if released:
            plural = "lock was" if released == 1 else "locks were"
            self.message_user(request, f"{released} {plural} force-released.", messages.SUCCESS)
        return HttpResponseRedirect(self._url("changelist"))

    @staticmethod
    def _pairs(request: HttpRequest) -> list[tuple[str, str]]:
        names = request.POST.getlist("lock")
        tokens = request.POST.getlist("token")
        return list(zip(names, tokens, strict=True)) if len(names) == len(tokens) else []

    def _release(
        self, request: HttpRequest, name: str, token: str, alias: str, *, quiet: bool = False
    ) -> ReleaseResult | None:
        """Release ``name`` if the holder with ``token`` still holds it; report it."""
        if not token:
            self.message_user(
                request,
                f"Lock “{name}” was not released: the request did not say which holder to "
                "release. Release it from its confirmation page.",
                messages.ERROR,
            )
            return None
        try:
            result = force_release_holder(name, token=token, connection=alias, user=request.user)
        except RedisLockError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return None
        if result.status == RELEASED:
            self.log_release(request, name, result.info, alias)
            if not quiet:
                self.message_user(request, f"Lock “{name}” was force-released.", messages.SUCCESS)
        elif result.status == CHANGED_HANDS:
            now = f" (now held by {result.info.owner})" if result.info else ""
            self.message_user(
                request,
                f"Lock “{name}” changed hands since the page was loaded{now}; it was not released.",
                messages.WARNING,
            )
        else:
            self.message_user(
                request,
                f"Lock “{name}” was no longer held (released or expired); nothing was released.",
                messages.WARNING,
            )
        return result

    def log_release(
        self, request: HttpRequest, name: str, info: LockInfo | None, alias: str
    ) -> LogEntry:
        """Write the admin log entry of a force-release."""
        content_type = ContentType.objects.get_for_model(HeldLock, for_concrete_model=False)
        if info is not None:
            message = f"Force-released on connection “{alias}”: " + "; ".join(
                f"held by {h.owner}{f' for {h.purpose}' if h.purpose else ''}, fence "
                f"{'none' if h.fence is None else h.fence}, token {h.short_token}"
                for h in info.holders
            )
        else:
            message = f"Force-released on connection “{alias}”"
        return LogEntry.objects.create(
            user_id=request.user.pk,
            content_type_id=content_type.pk,
            object_id=name,
            object_repr=name[:200],
            action_flag=DELETION,
            change_message=message,
        )


admin.site.register(HeldLock, HeldLockAdmin)
