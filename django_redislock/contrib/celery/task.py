"""``LockedTask``: a Celery task base class that runs its body while holding a lock."""

from __future__ import annotations

import logging
import random
from contextvars import ContextVar
from typing import Any, ClassVar

from celery import Task
from celery.signals import task_revoked
from kombu.utils.uuid import uuid

from ...exceptions import LockBackendUnavailable, LockNotAcquired
from ...factory import make_lock
from ...lock import BaseLock
from . import queued
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

    def apply_async(
        self,
        args: Any = None,
        kwargs: Any = None,
        task_id: str | None = None,
        producer: Any = None,
        link: Any = None,
        link_error: Any = None,
        shadow: Any = None,
        **send_options: Any,
    ) -> Any:
        """Send the task; in the queued scope, only if none is queued or running for its key.

        A duplicate returns the ``AsyncResult`` of the one already queued (same id), or
        raises ``LockNotAcquired`` with ``on_busy="error"``.
        """
        options = self.lock_options
        is_retry = task_id is not None and task_id == self.request.id
        passed = {"producer": producer, "link": link, "link_error": link_error, "shadow": shadow}
        if options.scope != "queued" or is_retry:
            return super().apply_async(args, kwargs, task_id, **passed, **send_options)
        name = options.lock_name(tuple(args or ()), dict(kwargs or {}))
        task_id = task_id or uuid()
        marker, existing = queued.take_marker(self.name, name, task_id, options)
        if marker is None:
            logger.info("Task %s is already queued for %r as %s", self.name, name, existing)
            return self.AsyncResult(existing)
        headers = {**(send_options.pop("headers", None) or {}), queued.TOKEN_HEADER: marker.token}
        try:
            return super().apply_async(
                args, kwargs, task_id, **passed, headers=headers, **send_options
            )
        except BaseException:
            queued.drop_marker(marker)
            raise

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        options = self.lock_options
        name = options.lock_name(args, kwargs)
        if options.scope == "queued":
            token = queued.token_of(self.request)
            lock = self._new_lock(queued.running_name(name), options)
            return self._run_holding(lock, options, args, kwargs, (name, token))
        return self._run_holding(self._new_lock(name, options), options, args, kwargs)

    def _new_lock(self, name: str, options: LockOptions) -> BaseLock:
        return make_lock(
            name,
            **{
                "purpose": f"celery task {self.name}",
                **options.lock_kwargs,
                "ttl": options.ttl,
                "watchdog": options.watchdog,
                "on_lost": self.on_lock_lost,
            },
        )

    def _run_holding(
        self,
        lock: BaseLock,
        options: LockOptions,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        queued_marker: tuple[str, str | None] | None = None,
    ) -> Any:
        wait = options.timeout if options.on_busy == "wait" else 0
        try:
            acquired = lock.acquire(timeout=wait)
        except LockBackendUnavailable as error:
            if options.on_unavailable != "retry":
                raise
            logger.warning(
                "Retrying task %s[%s] in %.1fs: lock %r unavailable: %s",
                self.name,
                self.request.id,
                options.unavailable_countdown,
                lock.name,
                error,
            )
            countdown = options.unavailable_countdown * random.uniform(1.0, 1.2)
            raise self.retry(countdown=countdown, exc=error) from error
        if not acquired:
            return self._busy(lock, options)
        marker = None
        context = _held.set((*_held.get(), (self.name, lock)))
        try:
            try:
                if queued_marker is not None:  # inside: its error releases the lock too
                    marker = queued.adopt_marker(
                        *queued_marker, options, ttl=options.ttl, watchdog=options.watchdog
                    )
                result = super().__call__(*args, **kwargs)
            finally:
                _held.reset(context)
                if marker is not None:
                    queued.drop_marker(marker)
        except BaseException as exc:
            lock.__exit__(type(exc), exc, exc.__traceback__)
            raise
        lock.__exit__(None, None, None)  # releases; raises LockLost if it was lost
        return result

    def _busy(self, lock: BaseLock, options: LockOptions) -> Any:
        left = lock.last_holder_ttl
        held = "" if left is None else f" (the holder's lock expires in {left:.3f}s)"
        if options.on_busy == "skip" or options.scope == "queued":
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


@task_revoked.connect
def _release_revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
    """A queued task revoked before it ran: free its marker (in the worker that drops it)."""
    token = queued.token_of(request)
    if not isinstance(sender, LockedTask) or not token:
        return
    options = sender.lock_options
    name = options.lock_name(tuple(request.args or ()), dict(request.kwargs or {}))
    queued.release_revoked(name, token, options)


__all__ = ["SKIPPED", "LockedTask", "is_skipped"]
