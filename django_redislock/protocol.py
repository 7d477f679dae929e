"""The lock lifecycle, written once: each call is a generator of steps.

A step is :class:`Send` (run one of the lock's operation hooks, ``_do_acquire`` and the
like, which send its kind's operation over its transport) or :class:`Wait` (sleep until
woken or a deadline). The generator receives each step's reply, or has the step's error
thrown in, and returns the call's result. :mod:`django_redislock.drivers` runs it for sync
callers (:func:`~.drivers.run`) and async ones (:func:`~.drivers.arun`), so both walk the
same steps; the drivers own the cancellation rules.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.exceptions import RedisError

if TYPE_CHECKING:
    from .base import BaseLock
    from .waiting import Waiter


class Send(NamedTuple):
    """Run the lock's hook ``hook`` (a sync name; the async driver uses its ``_a`` twin)."""

    hook: str
    args: tuple[Any, ...]
    #: Async: runs to its end even if the caller is cancelled (a release).
    shielded: bool = False


class Wait(NamedTuple):
    """Sleep up to ``seconds``, or until ``waiter`` (when there is one) is woken."""

    seconds: float
    waiter: Waiter | None


Step = Send | Wait


def release(lock: BaseLock) -> Generator[Step, Any, None]:
    """``release()``: compare-and-delete by this object's token; ``LockNotOwned`` if gone."""
    token = lock._owned_token("release")
    lock._forget()
    try:
        released = yield Send("_do_release", (token,), shielded=True)
    except RedisError as exc:
        raise lock._backend_error(exc) from exc
    lock._after_release(released)


__all__ = ["Send", "Step", "Wait", "release"]
