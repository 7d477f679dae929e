"""What a step of a call written once (:mod:`django_redislock.protocol`) asks its driver
(:mod:`django_redislock.drivers`) to do: send (call a sync method, or await its async
twin) or wait (sleep, or until a waiter is woken)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from .waiting import LoopWake, ThreadWake


class Send(NamedTuple):
    """Call ``target.method(*args)``: a lock's operation hook (``_do_release``) or a
    transport's ``call``. The async driver awaits the async twin (``_ado_release``,
    ``acall``: see :func:`async_name`)."""

    target: Any
    method: str
    args: tuple[Any, ...]
    #: Async: runs to its end even if the caller is cancelled (a release).
    shielded: bool = False
    #: Safe to send twice (a compare-and-delete by token): a shielded step then runs in
    #: the caller's task, and is sent again in a task of its own if the caller is
    #: cancelled mid-way, instead of always paying a task (and its loop turns).
    repeatable: bool = False


def async_name(method: str) -> str:
    """The async twin of a sync method's name: ``_do_x`` -> ``_ado_x``, ``call`` -> ``acall``."""
    name = _ASYNC_NAMES.get(method)
    if name is None:
        name = _ASYNC_NAMES[method] = "_a" + method[1:] if method[0] == "_" else "a" + method
    return name


_ASYNC_NAMES: dict[str, str] = {}


class Wait(NamedTuple):
    """Sleep up to ``seconds``, or until ``wakeup`` (when there is one) is set."""

    seconds: float
    wakeup: ThreadWake | LoopWake | None


Step = Send | Wait


__all__ = ["Send", "Step", "Wait", "async_name"]
