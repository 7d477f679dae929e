"""Force-release from the admin: a GET confirmation page showing the holder, then a
CSRF-protected POST carrying that holder's token, so a lock taken by someone else since
the page loaded is left alone; one lock, or the selected ones from the list. Each release
writes a ``LogEntry`` and sends ``lock_force_released``."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.models import DELETION, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from ..admin_listing import CONNECTION_VAR
from ..exceptions import InvalidLockName, RedisLockError
from ..inspection import (
    CHANGED_HANDS,
    RELEASED,
    LockInfo,
    ReleaseResult,
    force_release_holder,
    lock_info,
)
from ..keys import validate_name
from ..models import HeldLock
from .base import HOLDER_VAR, LockAdminBase

ACTION_NAME = "release_selected"


class ReleaseViews(LockAdminBase):
    """The force-release pages."""

    def release_urls(self, prefix: str) -> list[URLPattern]:
        """The release pages' URL patterns (``prefix``: the admin's URL name prefix)."""
        wrap = self.admin_site.admin_view
        return [
            path("release/", wrap(self.release_selected_view), name=f"{prefix}_release_selected"),
            path("<str:object_id>/release/", wrap(self.release_view), name=f"{prefix}_release"),
        ]

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


__all__ = ["ACTION_NAME", "ReleaseViews"]
