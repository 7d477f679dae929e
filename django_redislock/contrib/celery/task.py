"""``LockedTask``: a Celery task base class that runs its body while holding a lock."""

from __future__ import annotations

import logging
import random
from contextvars import ContextVar
from typing import Any, ClassVar

from celery import Task

from ...exceptions import LockNotAcquired
from ...factory import make_lock
from ...lock import BaseLock
from .options import LockOptions, parse

logger = logging.getLogger("django_redislock.celery")

#: The locks held by the task bodies running in this thread / context: (task name, lock).
#: A ContextVar, not an attribute of the task: one task object serves every thread of a
#: ``--pool threads`` worker at once.
_held: ContextVar[tuple[tuple[str, BaseLock], ...]] = ContextVar(
    "redislock_celery_held", default=()
)

#: The marker in a skipped task's result (``is_skipped(result)`` tells).
SKIPPED = "redislock:skipped"


def is_skipped(result: Any) -> bool:
    """True for the result of a task run that ``on_busy="skip"`` skipped."""
    return isinstance(result, dict) and result.get("redislock") == SKIPPED


def skipped_result(lock: BaseLock) -> dict[str, Any]:
    """What a skipped run returns: JSON-serializable, and unlike any value a body returns."""
    return {"redislock": SKIPPED, "lock": lock.name, "holder_ttl": lock.last_holder_ttl}


class LockedTask(Task):
    """A Celery task that runs one execution at a time per lock key.

    ``@app.task(base=LockedTask, lock={"name": "report:{report_id}", "on_busy": "skip"})``.
    The ``lock`` keys are documented in ``docs/celery.md``; inside the body,
    ``self.held_lock`` is the held lock (its ``fence`` guards writes).
    """

    abstract = True
    #: The task's lock option (set by ``@app.task(lock={...})``).
    lock: ClassVar[dict[str, Any] | None] = None
    _lock_options: ClassVar[LockOptions | None] = None

    @property
    def lock_options(self) -> LockOptions:
        """The parsed ``lock`` option (checked once per task class)."""
        cls = type(self)
        options = cls.__dict__.get("_lock_options")
        if options is None:
            options = parse(self.name, self.run, cls.lock)
            cls._lock_options = options
        return options

    def __init__(self) -> None:
        super().__init__()
        if self.name is not None:  # a task, not a base class: a bad option fails at definition
            self.lock_options  # noqa: B018

    @property
    def held_lock(self) -> BaseLock | None:
        """The lock this task's body holds now (``None`` outside the body)."""
        for name, lock in reversed(_held.get()):
            if name == self.name:
                return lock
        return None

    def on_lock_lost(self, lock: BaseLock) -> None:
        """Called (in the watchdog's thread) when the body's lock was lost while it ran.

        The default logs an error; the run then fails with ``LockLost`` when the body
        returns. Override to stop the work early, or check ``self.held_lock.lost``.
        """
        logger.error(
            "Task %s lost its lock %r while running (expired or taken over); "
            "another run may start now",
            self.name,
            lock.name,
        )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        options = self.lock_options
        lock = make_lock(
            options.lock_name(args, kwargs),
            **{
                "purpose": f"celery task {self.name}",
                **options.lock_kwargs,
                "ttl": options.ttl,
                "watchdog": options.watchdog,
                "on_lost": self.on_lock_lost,
            },
        )
        wait = options.timeout if options.on_busy == "wait" else 0
        if not lock.acquire(timeout=wait):
            return self._busy(lock, options)
        context = _held.set((*_held.get(), (self.name, lock)))
        try:
            result = super().__call__(*args, **kwargs)
        except BaseException as exc:
            _held.reset(context)
            lock.__exit__(type(exc), exc, exc.__traceback__)
            raise
        _held.reset(context)
        lock.__exit__(None, None, None)  # releases; raises LockLost if it was lost
        return result

    def _busy(self, lock: BaseLock, options: LockOptions) -> Any:
        left = lock.last_holder_ttl
        held = "" if left is None else f" (the holder's lock expires in {left:.3f}s)"
        if options.on_busy == "skip":
            logger.warning(
                "Skipped task %s[%s]: lock %r is held by another run%s",
                self.name,
                self.request.id,
                lock.name,
                held,
            )
            return skipped_result(lock)
        error = LockNotAcquired(
            f"Task {self.name} could not acquire lock {lock.name!r}: another run holds it{held}.",
            lock_name=lock.name,
            remaining=left,
        )
        if options.on_busy == "retry":
            # Retry when the holder's lock would expire (its watchdog usually renews it:
            # then this retries again), spread a little so that retries do not arrive together.
            countdown = max(left if left is not None else lock.ttl, 0.05)
            raise self.retry(countdown=countdown * random.uniform(1.0, 1.2), exc=error)
        raise error


__all__ = ["SKIPPED", "LockedTask", "is_skipped"]
