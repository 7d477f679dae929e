"""The Celery app of the Celery tests, and its tasks.

The tests start real workers with ``celery -A tests.support.celery_app worker``; in those
processes ``REDISLOCK_CELERY_URL`` (broker, results and locks: one server the tests started)
and ``REDISLOCK_CELERY_DB`` (a shared SQLite file) configure Django here. In the test
process the module only defines the tasks (to send them) and :func:`configure` points the
app at the server.

Each task body appends lines to a log file it is given (one ``os.write`` on an
``O_APPEND`` file, so lines never interleave): ``start T PID TASK_ID FENCE`` and
``end T PID TASK_ID FENCE``, T from ``time.monotonic_ns()`` (one clock for the machine).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from celery import Celery

from django_redislock.contrib.celery import LockedTask

URL_ENV = "REDISLOCK_CELERY_URL"
DB_ENV = "REDISLOCK_CELERY_DB"
#: A second server, the lock connection ``lockstore`` only: the tests stop and start it
#: while the broker stays up.
LOCKSTORE_ENV = "REDISLOCK_CELERY_LOCKSTORE_URL"
#: The ORM model of the fencing test (defined in worker processes only).
Account: Any = None

app = Celery("redislock_tests")
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_prefetch_multiplier=1,  # spread one key's tasks over every worker
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
    task_track_started=True,
)


def configure(url: str) -> None:
    """Broker and result backend on the server at ``url``.

    Each test module has a server of its own; one xdist worker may run several modules,
    so the connections and the result backend cached for the last server (closed by now)
    are dropped (Celery's own reset after fork, plus the backend it keeps per thread).
    """
    app.conf.update(broker_url=url, result_backend=url)
    if app._pool is not None:
        app._pool.force_close_all()
    app._after_fork()
    app._backend_cache = None
    app._local = threading.local()


#: Seconds after which the broker hands an unacknowledged message to another worker (set
#: only for the workers of the ``acks_late`` test; Celery's default is an hour).
VISIBILITY_ENV = "REDISLOCK_CELERY_VISIBILITY"
#: The queue of those workers: their redelivery sweeps take a mutex of its own.
QUEUE_ENV = "REDISLOCK_CELERY_QUEUE"
if os.environ.get(VISIBILITY_ENV):
    app.conf.broker_transport_options = {
        "visibility_timeout": float(os.environ[VISIBILITY_ENV]),
        "unacked_restore_interval": 0.2,
        "unacked_restore_throttle": 1,
        # kombu sweeps under one mutex per database (expiring after 300 s): a worker the
        # test kills mid-sweep would leave it held and stop every later redelivery. A
        # mutex of this worker's queue, short-lived, keeps one test from blocking the next.
        "unacked_mutex_key": f"unacked_mutex:{os.environ.get(QUEUE_ENV, '')}",
        "unacked_mutex_expire": 5,
    }

if URL_ENV in os.environ:  # a worker process
    from tests.support.fencing_workers import setup

    lockstore = os.environ.get(LOCKSTORE_ENV) or os.environ[URL_ENV]
    Account = setup(
        os.environ[URL_ENV], os.environ[DB_ENV], CONNECTIONS={"lockstore": {"URL": lockstore}}
    )
    configure(os.environ[URL_ENV])


def log_event(log: str, event: str, task: Any, detail: Any = "") -> None:
    line = f"{event} {time.monotonic_ns()} {os.getpid()} {task.request.id} {detail}\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _section(task: Any, key: str, log: str, seconds: float) -> int | None:
    lock = getattr(task, "held_lock", None)
    fence = lock.fence if lock is not None else None
    log_event(log, "start", task, fence)
    time.sleep(seconds)
    log_event(log, "end", task, fence)
    return fence


SHORT = {"ttl": 1.0}  # the watchdog renews it; a dead worker's lock frees within a second


@app.task(bind=True, base=LockedTask, lock={"name": "skip:{key}", **SHORT})
def skip_task(self: Any, key: str, log: str, seconds: float) -> int | None:
    return _section(self, key, log, seconds)


@app.task(
    bind=True,
    base=LockedTask,
    lock={"name": "wait:{key}", "on_busy": "wait", "timeout": 60, **SHORT},
)
def wait_task(self: Any, key: str, log: str, seconds: float) -> int | None:
    return _section(self, key, log, seconds)


@app.task(
    bind=True,
    base=LockedTask,
    max_retries=None,
    lock={"name": "retry:{key}", "on_busy": "retry", "ttl": 0.3},
)
def retry_task(self: Any, key: str, log: str, seconds: float) -> int | None:
    log_event(log, "attempt", self, self.request.retries)
    return _section(self, key, log, seconds)


DOWN = {"connection": "lockstore", "ttl": 1.0}


@app.task(
    bind=True,
    base=LockedTask,
    max_retries=None,
    lock={"name": "down:{key}", "on_unavailable": "retry", "unavailable_countdown": 0.2, **DOWN},
)
def unavailable_retry_task(self: Any, key: str) -> int:
    """Retried while the lock server is down; returns how many retries it took."""
    return int(self.request.retries)


@app.task(bind=True, base=LockedTask, lock={"name": "down:{key}", **DOWN})
def unavailable_error_task(self: Any, key: str) -> int:
    return int(self.request.retries)


@app.task
def socket_module() -> str:
    """Where the worker's ``socket.socket`` comes from: ``gevent...`` once patched."""
    import socket

    return str(socket.socket.__module__)


@app.task(bind=True)
def unlocked_task(self: Any, key: str, log: str, seconds: float) -> None:
    """The same work without a lock: what the overlap checker must catch."""
    return _section(self, key, log, seconds)


@app.task(bind=True, base=LockedTask, lock={"name": "error:{key}", "on_busy": "error", **SHORT})
def error_task(self: Any, key: str, log: str, seconds: float) -> int | None:
    return _section(self, key, log, seconds)


class ReportingTask(LockedTask):
    """Reports ``on_lost`` in the Redis list ``on_lost`` (it runs in the watchdog's thread,
    where the task's request is not at hand)."""

    def on_lock_lost(self, lock: Any) -> None:
        from django_redislock.connection import lock_client

        super().on_lock_lost(lock)
        lock_client("default").rpush("on_lost", lock.name)


@app.task(bind=True, base=ReportingTask, lock={"name": "watched:{key}", **SHORT})
def lose_task(self: Any, key: str, log: str) -> bool:
    """Hold the lock until it is lost (the test force-releases it), then return."""
    log_event(log, "start", self, self.held_lock.fence)
    while not self.held_lock.lost:
        time.sleep(0.01)
    log_event(log, "noticed", self)
    return True


@app.task(
    bind=True,
    base=LockedTask,
    lock={"name": "account", "ttl": 0.3, "watchdog": False, "on_busy": "wait", "timeout": 30},
)
def fenced_deposit(self: Any, amount: int, log: str, go_key: str | None = None) -> int:
    """Read the balance, (wait for ``go_key`` in Redis,) write balance + amount, fenced."""
    from django_redislock import StaleFence
    from django_redislock.fencing import fenced_update

    balance = Account.objects.get(pk=1).balance
    log_event(log, "read", self, self.held_lock.fence)
    _wait_for(go_key)
    try:
        fenced_update(Account.objects.filter(pk=1), self.held_lock, balance=balance + amount)
    except StaleFence:
        log_event(log, "stale", self, self.held_lock.fence)
    else:
        log_event(log, "written", self, self.held_lock.fence)
    return int(self.held_lock.fence)


def _wait_for(go_key: str | None) -> None:
    from django_redislock.connection import lock_client

    while go_key is not None and not lock_client("default").exists(go_key):
        time.sleep(0.01)


QUEUED = {"name": "queued:{key}", "scope": "queued", **SHORT}


@app.task(bind=True, base=LockedTask, lock=QUEUED)
def queued_task(self: Any, key: str, log: str, go_key: str | None = None) -> str:
    """Runs once ``go_key`` exists in Redis (tests hold it queued or running until then)."""
    log_event(log, "start", self, self.held_lock.fence)
    _wait_for(go_key)
    log_event(log, "end", self, self.held_lock.fence)
    return str(self.request.id)


@app.task(bind=True, base=LockedTask, lock={**QUEUED, "on_busy": "error"})
def queued_error_task(self: Any, key: str, log: str, go_key: str | None = None) -> str:
    _wait_for(go_key)
    return str(self.request.id)


@app.task(bind=True, base=LockedTask, lock={**QUEUED, "queued_ttl": 1.0})
def short_queued_task(self: Any, key: str) -> str:
    return str(self.request.id)


@app.task(
    bind=True,
    base=LockedTask,
    lock={"name": "hold:{key}", "on_busy": "wait", "timeout": 60, **SHORT},
)
def hold_task(self: Any, key: str, log: str, go_key: str | None = None) -> int:
    """Holds ``hold:{key}`` until ``go_key`` exists (without one: not at all)."""
    log_event(log, "start", self, self.held_lock.fence)
    _wait_for(go_key)
    log_event(log, "end", self, self.held_lock.fence)
    return int(self.held_lock.fence)


@app.task(bind=True, base=LockedTask, time_limit=1, lock={"name": "hold:{key}", **SHORT})
def limited_task(self: Any, key: str, log: str) -> None:
    """Runs past its hard time limit: the pool kills the process running it."""
    log_event(log, "start", self, self.held_lock.fence)
    time.sleep(60)


class LogsDeliveries:
    """Logs ``delivered`` each time a worker starts the task (before any lock)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        log_event(args[1], "delivered", self)
        return super().__call__(*args, **kwargs)  # type: ignore[misc]


class LateLockedTask(LogsDeliveries, LockedTask):
    pass


class LateTask(LogsDeliveries, app.Task):  # type: ignore[name-defined]
    pass


def _section_until_redelivered(task: Any, log: str) -> None:
    """Run until a second worker got this same message (then 0.5 s more): the broker's
    redelivery happens while this run is on, however slow the machine is."""
    log_event(log, "start", task)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(log) as lines:
            pids = {line.split()[2] for line in lines if line.startswith("delivered ")}
        if len(pids) >= 2:
            break
        time.sleep(0.01)
    time.sleep(0.5)
    log_event(log, "end", task)


@app.task(bind=True, base=LateLockedTask, acks_late=True, lock={"name": "late:{key}", **SHORT})
def late_task(self: Any, key: str, log: str) -> None:
    _section_until_redelivered(self, log)


@app.task(bind=True, base=LateTask, acks_late=True)
def late_unlocked_task(self: Any, key: str, log: str) -> None:
    _section_until_redelivered(self, log)


@app.task(
    bind=True,
    base=LockedTask,
    max_retries=1,
    # wait: the retry message may reach a worker before this run has let the lock go
    lock={"name": "again:{key}", "on_busy": "wait", "timeout": 30, **SHORT},
)
def retry_once_task(self: Any, key: str, fences: list[int] | None = None) -> list[int]:
    """Asks for a retry from inside the body once: the lock must be free for the retry."""
    fences = [*(fences or []), self.held_lock.fence]
    if len(fences) == 1:
        raise self.retry(kwargs={"key": key, "fences": fences}, countdown=0)
    return fences
