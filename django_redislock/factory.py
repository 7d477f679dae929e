"""Building a lock from the arguments of a decorator or a command, and reading its holder.

Shared by :mod:`django_redislock.decorators` and :class:`LockedCommand`
(:mod:`django_redislock.locked_command`), which both build a lock per call from a name
and keyword arguments, and report who holds it when it is busy.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from . import drivers, registry
from .exceptions import RedisLockError

if TYPE_CHECKING:
    from .inspection import LockInfo
    from .lock import BaseLock
    from .steps import Step

view_logger = logging.getLogger("django_redislock.views")

#: What ``backend=`` takes besides the lock class's own keyword arguments.
BACKENDS = tuple(registry.BACKENDS)


def lock_class(
    backend: str | None = None, connections: Any = None, kind: str = "lock"
) -> type[BaseLock]:
    """The class of ``kind`` (from the registry) for a decorator: over ``"redlock"`` for
    ``backend="redlock"`` or ``connections=[...]``, else over ``"redis"``. Redlock's
    module is imported only when asked for."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "redlock" or (backend is None and connections is not None):
        return registry.kind(kind).lock_class("redlock")
    if connections is not None:
        raise ValueError('connections=[...] needs backend="redlock" (or no backend)')
    return registry.kind(kind).lock_class("redis")


def check_lock_kwargs(lock_kwargs: dict[str, Any]) -> None:
    """Reject, at decoration time, keyword arguments the lock class does not take."""
    kwargs = dict(lock_kwargs)
    kind = kwargs.pop("kind", "lock")
    cls = lock_class(kwargs.pop("backend", None), kwargs.get("connections"), kind)
    params = inspect.signature(cls).parameters
    unknown = sorted(set(kwargs) - set(params) | ({"name"} & set(kwargs)))
    if unknown:
        allowed = sorted(set(params) - {"name"} | {"backend", "kind"})
        raise TypeError(
            f"Unknown lock option(s) {', '.join(unknown)} for {cls.__name__}; "
            f"allowed: {', '.join(allowed)}"
        )


def make_lock(name: str, **lock_kwargs: Any) -> BaseLock:
    """A new lock object named ``name`` (``kind=`` and ``backend=`` pick the class, see
    :func:`lock_class`)."""
    backend = lock_kwargs.pop("backend", None)
    kind = lock_kwargs.pop("kind", "lock")
    return lock_class(backend, lock_kwargs.get("connections"), kind)(name, **lock_kwargs)


def holder_info(lock: BaseLock) -> LockInfo | None:
    """Who holds ``lock``: the holder that refused its last acquire (from the refusing
    reply, no round trip), else read now (``None`` if nobody, or if Redis cannot tell us)."""
    return drivers.run(_holder_info(lock))


async def aholder_info(lock: BaseLock) -> LockInfo | None:
    """Async twin of :func:`holder_info`."""
    return await drivers.arun(_holder_info(lock))


def _holder_info(lock: BaseLock) -> Generator[Step, Any, LockInfo | None]:
    from .inspection import info_from_state, read_info

    alias = getattr(lock, "connection", None)
    if alias is None:
        alias = next(iter(getattr(lock, "connections", None) or ()), None)
    if lock.busy_holder is not None:
        return info_from_state(lock.name, lock.key, lock.busy_holder, alias or "")
    try:
        return (yield from read_info(lock.name, alias))
    except RedisLockError as exc:
        view_logger.warning("Could not read the holder of lock %r: %s", lock.name, exc)
        return None


__all__ = [
    "BACKENDS",
    "aholder_info",
    "check_lock_kwargs",
    "holder_info",
    "lock_class",
    "make_lock",
]
