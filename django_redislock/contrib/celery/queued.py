"""The queued scope: at most one task per key queued or running, de-duplicated at enqueue.

``apply_async`` takes a marker lock (no watchdog, ``queued_ttl``) whose holder details name
the task id, and sends its token in a message header. The worker that runs the task first
takes the key's running lock (``<name>:run``: one run at a time even if Celery delivers the
message twice, as ``acks_late`` can), then adopts the marker (its watchdog renews it while
the body runs) and releases both when the run ends. A duplicate enqueue finds the marker
and gets the queued task's ``AsyncResult``. A worker that dies leaves the marker for one
running TTL; a task nobody runs, for ``queued_ttl``; a revoked one is released by the
worker that discards it.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from ...exceptions import LockNotAcquired, RedisLockError
from ...factory import holder_info, make_lock
from ...lock import BaseLock
from .options import LockOptions

logger = logging.getLogger("django_redislock.celery")

#: The message header carrying the marker's token from the enqueuer to the worker.
TOKEN_HEADER = "redislock_queued_token"
_PURPOSE = "celery task {task} queued as {task_id}"
_QUEUED_AS = re.compile(r" queued as (\S+)$")
#: Tries to either take the marker or read who holds it (it may be freed in between).
_ATTEMPTS = 3


def token_of(request: Any) -> str | None:
    """The marker token in a task's request (a header; eager runs keep it in ``headers``)."""
    token = getattr(request, TOKEN_HEADER, None)
    if token is None:
        token = (getattr(request, "headers", None) or {}).get(TOKEN_HEADER)
    return token if isinstance(token, str) else None


def _connection_kwargs(options: LockOptions) -> dict[str, Any]:
    return {k: v for k, v in options.lock_kwargs.items() if k != "purpose"}


def queued_task_id(marker: BaseLock) -> str | None:
    """The id of the task holding the queued marker that ``marker`` could not take
    (``None`` if free); read from the refusing reply when it named the holder.

    ``LockNotAcquired`` if it is held by something that is not a queued task.
    """
    name = marker.name
    info = holder_info(marker)
    if info is None:
        return None
    match = _QUEUED_AS.search(info.purpose)
    if match is None:
        raise LockNotAcquired(
            f"Cannot queue a task under lock {name!r}: it is held by {info.purpose or 'a lock'} "
            f"(owner {info.owner}), not by a queued task.",
            lock_name=name,
            remaining=info.ttl,
        )
    return match.group(1)


def take_marker(
    task_name: str, name: str, task_id: str, options: LockOptions
) -> tuple[BaseLock | None, str | None]:
    """(the marker, None) if taken for ``task_id``; (None, the queued task's id) if busy."""
    wait = options.timeout if options.on_busy == "wait" else 0
    for _ in range(_ATTEMPTS):
        marker = make_lock(
            name,
            **_connection_kwargs(options),
            ttl=options.queued_ttl,
            watchdog=False,
            purpose=_PURPOSE.format(task=task_name, task_id=task_id),
        )
        if marker.acquire(timeout=wait):
            return marker, None
        existing = queued_task_id(marker)
        if existing is not None:
            if options.on_busy == "error":
                raise LockNotAcquired(
                    f"Task {task_name} is already queued or running for lock {name!r} "
                    f"(task id {existing}).",
                    lock_name=name,
                    remaining=marker.last_holder_ttl,
                )
            return None, existing
        wait = 0  # freed in between: try again at once
    raise LockNotAcquired(
        f"Could not queue task {task_name}: lock {name!r} kept changing hands.", lock_name=name
    )


def drop_marker(marker: BaseLock) -> None:
    """Release a marker whose task could not be sent."""
    try:
        marker.release()
    except RedisLockError as exc:
        logger.warning("Could not release the queued marker %r: %s", marker.name, exc)


def adopt_marker(
    name: str, token: str | None, options: LockOptions, **lock: Any
) -> BaseLock | None:
    """The marker, adopted by the worker running its task (``None`` if it is gone)."""
    if not token:
        return None
    marker = make_lock(name, **_connection_kwargs(options), **lock)
    if marker.adopt(token):
        return marker
    logger.warning(
        "The queued marker %r of this run expired or was taken before the run started "
        "(queued_ttl too short?); a duplicate may have been queued since",
        name,
    )
    return None


def release_revoked(name: str, token: str, options: LockOptions) -> None:
    """Free the marker of a task revoked before it ran."""
    marker = make_lock(name, **_connection_kwargs(options), watchdog=False)
    try:
        if marker.adopt(token):
            marker.release()
    except RedisLockError as exc:
        logger.warning("Could not release the marker %r of a revoked task: %s", name, exc)


def running_name(name: str) -> str:
    """The running lock's name beside the marker ``name``."""
    return f"{name}:run"


__all__ = [
    "TOKEN_HEADER",
    "adopt_marker",
    "drop_marker",
    "queued_task_id",
    "release_revoked",
    "running_name",
    "take_marker",
    "token_of",
]
