"""Decorators: ``locked`` (any callable), ``lock_view`` (views), ``lock_command`` (commands).

Each call builds a new lock object (never shared between calls or threads) and holds it
with ``with lock:`` / ``async with lock:``, so everything the lock's context manager does
on exit applies to decorated code as well. See ``docs/decorators.md``.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.http import HttpResponse
from django.utils.module_loading import import_string

from .conf import get_config
from .exceptions import LockNotAcquired
from .factory import aholder_info, check_lock_kwargs, holder_info, lock_class, make_lock
from .locked_command import run_locked, validate_on_busy
from .naming import CallNamer

if TYPE_CHECKING:
    from .lock import BaseLock

    _BusyHandler = Callable[[BaseLock, tuple[Any, ...], dict[str, Any]], Any]

P = ParamSpec("P")
R = TypeVar("R")

view_logger = logging.getLogger("django_redislock.views")


def dotted_path(func: Callable[..., Any]) -> str:
    """``module.qualname`` of a callable; for ``method_decorator`` partials, the class."""
    if isinstance(func, functools.partial):
        owner = getattr(func.func, "__self__", None)
        if owner is not None and not isinstance(owner, type):
            cls = type(owner)
            return f"{cls.__module__}.{cls.__qualname__}"
    module = getattr(func, "__module__", None) or ""
    qualname = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    qualname = str(qualname or repr(func))
    return f"{module}.{qualname}" if module else qualname


def _is_async(func: Callable[..., Any]) -> bool:
    if iscoroutinefunction(func):
        return True
    # method_decorator(name="dispatch") on a class-based view with async handlers:
    # the sync dispatch returns a coroutine, so the lock must be held while it runs.
    owner = getattr(func.func, "__self__", None) if isinstance(func, functools.partial) else None
    return bool(getattr(owner, "view_is_async", False))


def _where(func: Callable[..., Any]) -> str:
    return f"{dotted_path(func)}()"


def locked(
    name: str | Callable[..., str], **lock_kwargs: Any
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function (sync or ``async def``) while holding a lock.

    ``name``: a ``str.format`` template over the call's arguments (``"invoice:{invoice_id}"``,
    ``"order:{order.pk}"``) or a callable taking the same arguments and returning the name.
    ``lock_kwargs`` go to :class:`~django_redislock.Lock` (``ttl``, ``timeout``,
    ``watchdog``, ``connection``...), or to ``Redlock`` with ``backend="redlock"`` /
    ``connections=[...]``, or to a registered kind's class with ``kind="<name>"``.
    ``purpose`` defaults to the function's dotted path.
    Busy past the timeout: :class:`~django_redislock.LockNotAcquired`.
    """
    check_lock_kwargs(lock_kwargs)

    def decorator(func: Callable[P, R]) -> Callable[P, R]:
        namer = CallNamer(name, func, where=_where(func))
        options = {"purpose": dotted_path(func), **lock_kwargs}

        if iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                async with make_lock(namer(args, kwargs), **options):
                    return await func(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            with make_lock(namer(args, kwargs), **options):
                return func(*args, **kwargs)

        return wrapper

    return decorator


# -- views ----------------------------------------------------------------------


def retry_after(lock: BaseLock) -> int:
    """Whole seconds (rounded up, at least 1) until the holder's lock expires."""
    left = lock.last_holder_ttl
    return max(1, math.ceil(left)) if left else 1


def default_busy_response(lock: BaseLock) -> HttpResponse:
    """HTTP 423 Locked, ``Retry-After`` from the holder's remaining TTL, a short body."""
    seconds = retry_after(lock)
    response = HttpResponse(
        f"Locked: this resource is busy, retry in {seconds} s.\n",
        status=423,
        content_type="text/plain; charset=utf-8",
    )
    response["Retry-After"] = str(seconds)
    return response


@lru_cache(maxsize=32)
def _import_on_busy(path: str) -> Callable[..., Any]:
    return import_string(path)


def _resolve_on_busy(on_busy: Callable[..., Any] | str | None) -> Callable[..., Any] | None:
    if on_busy is None:
        on_busy = get_config()["VIEW_ON_BUSY"]
    if isinstance(on_busy, str):
        return _import_on_busy(on_busy)
    return on_busy


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("request")


def lock_view(
    name: str | Callable[..., str],
    *,
    on_busy: Callable[..., Any] | str | None = None,
    **lock_kwargs: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Serve the decorated view (function, ``async def``, or a class-based view's
    ``dispatch`` via ``method_decorator``) while holding a lock.

    ``name``: a template over the view's arguments (``request``, URL kwargs:
    ``"profile:{request.user.pk}"``, ``"order:{order_id}"``) or a callable taking them.
    The default ``timeout`` is 0 (do not wait). When busy: HTTP 423 with ``Retry-After``,
    or whatever ``on_busy(request, info)`` returns (``info``: the holder's
    :class:`~django_redislock.LockInfo` from the refusing reply, ``None`` if nobody held
    it). ``on_busy`` may be a dotted path; it defaults to ``REDISLOCK["VIEW_ON_BUSY"]``.
    ``purpose`` defaults to the view's dotted path (the class's for class-based views).
    """
    check_lock_kwargs(lock_kwargs)
    if on_busy is not None and not (callable(on_busy) or isinstance(on_busy, str)):
        raise ValueError(f"on_busy must be a callable or a dotted path, not {on_busy!r}")
    lock_kwargs.setdefault("timeout", 0)

    def decorator(view: Callable[P, R]) -> Callable[P, R]:
        namer = CallNamer(name, view, where=_where(view))
        options = {"purpose": dotted_path(view), **lock_kwargs}
        busy, abusy = _busy_handlers(on_busy, options["purpose"])
        if _is_async(view):
            return _async_locked_view(view, namer, options, abusy)  # type: ignore[return-value]

        @functools.wraps(view)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            lock = make_lock(namer(args, kwargs), **options)
            entered = False
            try:
                with lock:
                    entered = True
                    return view(*args, **kwargs)
            except LockNotAcquired:
                if entered:  # raised by the view itself, not by our acquire
                    raise
            return busy(lock, args, kwargs)

        return wrapper

    return decorator


def _busy_handlers(
    on_busy: Callable[..., Any] | str | None, purpose: str
) -> tuple[_BusyHandler, Callable[..., Awaitable[Any]]]:
    """What a locked view returns when busy: (for sync views, for async views)."""

    def busy(lock: BaseLock, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        view_logger.debug("%s: lock %r busy", purpose, lock.name)
        handler = _resolve_on_busy(on_busy)
        if handler is None:
            return default_busy_response(lock)
        if iscoroutinefunction(handler):
            handler = async_to_sync(handler)
        return handler(_request_of(args, kwargs), holder_info(lock))

    async def abusy(lock: BaseLock, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        view_logger.debug("%s: lock %r busy", purpose, lock.name)
        handler = _resolve_on_busy(on_busy)
        if handler is None:
            return default_busy_response(lock)
        info = await aholder_info(lock)
        if not iscoroutinefunction(handler):
            # The project's own sync code (it may use the ORM): in a thread, as Django does.
            handler = sync_to_async(handler)
        return await handler(_request_of(args, kwargs), info)

    return busy, abusy


def _async_locked_view(
    view: Callable[..., Any],
    namer: CallNamer,
    options: dict[str, Any],
    abusy: Callable[..., Awaitable[Any]],
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(view)
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        lock = make_lock(namer(args, kwargs), **options)
        entered = False
        try:
            async with lock:
                entered = True
                result: Any = view(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                return result
        except LockNotAcquired:
            if entered:
                raise
        return await abusy(lock, args, kwargs)

    return async_wrapper


# -- management commands -------------------------------------------------------------


def lock_command(
    name: str | Callable[..., str] | None = None,
    *,
    on_busy: str = "error",
    **lock_kwargs: Any,
) -> Callable[[Callable[P, R]], Callable[P, R | None]]:
    """Run a management command's ``handle`` while holding a lock.

    ``name`` defaults to the command's name; a template is filled from ``handle``'s
    arguments (``self`` and the options: ``"import:{source}"``). ``on_busy``: ``"error"``
    (``CommandError`` naming the holder and its remaining seconds), ``"skip"`` (a one-line
    notice on stderr, exit status 0) or ``"wait"`` (block up to ``timeout``, default for
    ever, then error). ``timeout`` defaults to 0 for "error" and "skip". ``purpose`` is
    ``manage.py <command>``.
    """
    if callable(name) and getattr(name, "__name__", "") == "handle":
        raise TypeError("Use @lock_command() with parentheses (or @lock_command('name')).")
    validate_on_busy(on_busy)
    check_lock_kwargs(lock_kwargs)

    def decorator(handle: Callable[P, R]) -> Callable[P, R | None]:
        namer = None if name is None else CallNamer(name, handle, where=_where(handle))

        @functools.wraps(handle)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
            command: Any = args[0]
            lock_name = None if namer is None else namer(args, kwargs)
            return run_locked(
                command,
                functools.partial(handle, *args, **kwargs),
                name=lock_name,
                on_busy=on_busy,
                lock_kwargs=lock_kwargs,
            )

        return wrapper

    return decorator


__all__ = [
    "check_lock_kwargs",
    "default_busy_response",
    "dotted_path",
    "holder_info",
    "lock_class",
    "lock_command",
    "lock_view",
    "locked",
    "make_lock",
    "retry_after",
]
