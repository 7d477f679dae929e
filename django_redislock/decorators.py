"""Decorators: ``locked`` (any callable), ``lock_view`` (views), ``lock_command`` (commands).

Each call builds a new lock object (never shared between calls or threads) and holds it
with ``with lock:`` / ``async with lock:``, so everything the lock's context manager does
on exit applies to decorated code as well. See ``docs/decorators.md``.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Awaitable, Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from asgiref.sync import async_to_sync, iscoroutinefunction, sync_to_async
from django.utils.module_loading import import_string

from .conf import get_config
from .exceptions import LockBackendUnavailable, LockNotAcquired
from .factory import aholder_info, check_lock_kwargs, holder_info, lock_class, make_lock
from .locked_command import run_locked, validate_on_busy
from .naming import CallNamer
from .responses import default_busy_response, default_unavailable_response, retry_after

if TYPE_CHECKING:
    from .inspection import LockInfo
    from .lock import BaseLock

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
        options = namer.lock_options({"purpose": dotted_path(func), **lock_kwargs})

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


@lru_cache(maxsize=32)
def _import_handler(path: str) -> Callable[..., Any]:
    return import_string(path)


def _resolve_handler(
    handler: Callable[..., Any] | str | None, setting: str
) -> Callable[..., Any] | None:
    """The view's own handler, else ``REDISLOCK[setting]``; a dotted path is imported."""
    if handler is None:
        handler = get_config()[setting]
    if isinstance(handler, str):
        return _import_handler(handler)
    return handler


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("request")


def lock_view(
    name: str | Callable[..., str],
    *,
    on_busy: Callable[..., Any] | str | None = None,
    on_unavailable: Callable[..., Any] | str | None = None,
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
    The lock server unreachable: HTTP 503 with ``Retry-After``
    (``REDISLOCK["VIEW_UNAVAILABLE_RETRY_AFTER"]``), or whatever
    ``on_unavailable(request, error)`` returns (default ``REDISLOCK["VIEW_ON_UNAVAILABLE"]``);
    never a 500 from the lock itself. A release that fails after the view ran is logged and
    the view's response is returned (the lock expires with its TTL).
    ``purpose`` defaults to the view's dotted path (the class's for class-based views).
    """
    check_lock_kwargs(lock_kwargs)
    for label, handler in (("on_busy", on_busy), ("on_unavailable", on_unavailable)):
        if handler is not None and not (callable(handler) or isinstance(handler, str)):
            raise ValueError(f"{label} must be a callable or a dotted path, not {handler!r}")
    lock_kwargs.setdefault("timeout", 0)

    def decorator(view: Callable[P, R]) -> Callable[P, R]:
        namer = CallNamer(name, view, where=_where(view))
        options = namer.lock_options({"purpose": dotted_path(view), **lock_kwargs})
        handlers = _ViewHandlers(on_busy, on_unavailable, options["purpose"])
        if _is_async(view):
            return _async_locked_view(view, namer, options, handlers)  # type: ignore[return-value]

        @functools.wraps(view)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            lock = make_lock(namer(args, kwargs), **options)
            entered = done = False
            result: Any = None
            try:
                with lock:
                    entered = True
                    result = view(*args, **kwargs)
                    done = True
                return result
            except LockNotAcquired:
                if entered:  # raised by the view itself, not by our acquire
                    raise
                request = _request_of(args, kwargs)
                return handlers.busy(lock, holder_info(lock), request, False)
            except LockBackendUnavailable as error:
                if done:  # the release failed: the view's work is done, its answer stands
                    handlers.release_failed(lock, error)
                    return result
                if entered:
                    raise
                request = _request_of(args, kwargs)
                return handlers.unavailable(lock, error, request, False)

        return wrapper

    return decorator


def _call(handler: Callable[..., Any], asynchronous: bool, *args: Any) -> Any:
    """Call a project's handler from a sync view (a coroutine function through
    ``async_to_sync``) or an async one (a sync function in a thread, as Django does: it may
    use the ORM); from an async view the result is to be awaited."""
    if asynchronous:
        return (handler if iscoroutinefunction(handler) else sync_to_async(handler))(*args)
    return (async_to_sync(handler) if iscoroutinefunction(handler) else handler)(*args)


class _ViewHandlers:
    """What a locked view answers when it cannot run: busy (423) or unavailable (503)."""

    def __init__(
        self,
        on_busy: Callable[..., Any] | str | None,
        on_unavailable: Callable[..., Any] | str | None,
        purpose: str,
    ) -> None:
        self.on_busy = on_busy
        self.on_unavailable = on_unavailable
        self.purpose = purpose

    def busy(self, lock: BaseLock, info: LockInfo | None, request: Any, asynchronous: bool) -> Any:
        """The busy answer; ``info`` is the holder (read by the caller, sync or async)."""
        view_logger.debug("%s: lock %r busy", self.purpose, lock.name)
        handler = _resolve_handler(self.on_busy, "VIEW_ON_BUSY")
        if handler is None:
            return default_busy_response(lock, info, request)
        return _call(handler, asynchronous, request, info)

    def unavailable(
        self, lock: BaseLock, error: LockBackendUnavailable, request: Any, asynchronous: bool
    ) -> Any:
        view_logger.warning(
            "%s: lock %r unavailable, answering 503: %s", self.purpose, lock.name, error
        )
        handler = _resolve_handler(self.on_unavailable, "VIEW_ON_UNAVAILABLE")
        if handler is None:
            return default_unavailable_response(error, request)
        return _call(handler, asynchronous, request, error)

    def release_failed(self, lock: BaseLock, error: LockBackendUnavailable) -> None:
        view_logger.warning(
            "%s: lock %r could not be released (it expires within its TTL): %s",
            self.purpose,
            lock.name,
            error,
        )


async def _awaited(result: Any) -> Any:
    return await result if inspect.isawaitable(result) else result


def _async_locked_view(
    view: Callable[..., Any],
    namer: CallNamer,
    options: dict[str, Any],
    handlers: _ViewHandlers,
) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(view)
    async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
        lock = make_lock(namer(args, kwargs), **options)
        entered = done = False
        result: Any = None
        try:
            async with lock:
                entered = True
                result = view(*args, **kwargs)
                if inspect.isawaitable(result):
                    result = await result
                done = True
            return result
        except LockNotAcquired:
            if entered:
                raise
            info = await aholder_info(lock)
            return await _awaited(handlers.busy(lock, info, _request_of(args, kwargs), True))
        except LockBackendUnavailable as error:
            if done:
                handlers.release_failed(lock, error)
                return result
            if entered:
                raise
            request = _request_of(args, kwargs)
            return await _awaited(handlers.unavailable(lock, error, request, True))

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
        options = lock_kwargs if namer is None else namer.lock_options(lock_kwargs)

        @functools.wraps(handle)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R | None:
            command: Any = args[0]
            lock_name = None if namer is None else namer(args, kwargs)
            return run_locked(
                command,
                functools.partial(handle, *args, **kwargs),
                name=lock_name,
                on_busy=on_busy,
                lock_kwargs=options,
            )

        return wrapper

    return decorator


__all__ = [
    "check_lock_kwargs",
    "default_busy_response",
    "default_unavailable_response",
    "dotted_path",
    "holder_info",
    "lock_class",
    "lock_command",
    "lock_view",
    "locked",
    "make_lock",
    "retry_after",
]
