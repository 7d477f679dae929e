"""Run a child process only while holding a lock: ``manage.py redislock run``.

The child starts after the lock is taken (with a watchdog), learns the lock's name and
fence from its environment, and the lock is released only after the child has exited.
If the lock is lost while the child runs, the child gets SIGTERM, then SIGKILL after the
grace period. SIGTERM and SIGINT sent to the supervisor are passed on to the child (while
the lock is still awaited they stop the wait). The child leads its own process group: when
it exits, whatever it left running in that group gets SIGTERM, then SIGKILL after the
grace, and the lock is released only after the group is empty.

The hazard this cannot remove: a supervisor that is frozen (SIGSTOP, a paused VM) stops
renewing, another host takes the lock, and this child keeps running meanwhile. The
fence in ``REDISLOCK_FENCE`` is how the child's writes can be refused (docs/election.md).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from .exceptions import LockNotOwned
from .factory import holder_info
from .lock import Lock
from .locked_command import describe_holder

#: Exit status when the lock is busy (``EX_TEMPFAIL``: try again later).
EXIT_BUSY = 75
#: Exit status when the lock was lost while the child ran.
EXIT_LOST = 76
ON_BUSY = ("error", "skip", "wait")
FORWARDED = (signal.SIGTERM, signal.SIGINT)
#: How often the group left behind by the child is looked at while it stops.
GROUP_POLL = 0.02
#: How long processes get to vanish after SIGKILL before the lock is released anyway.
KILL_WAIT = 5.0


@dataclass
class RunOptions:
    """What ``redislock run`` was asked to do."""

    name: str
    command: Sequence[str]
    ttl: float | None = None
    on_busy: str = "error"
    lock_timeout: float | None = None
    grace: float = 10.0
    connection: str | None = None


def exit_status(returncode: int) -> int:
    """The child's exit status as a shell reports it: a child killed by signal N -> 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


class _Stopped(BaseException):
    """SIGTERM or SIGINT arrived while waiting for the lock: give up without running."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _Signals:
    """SIGTERM / SIGINT handling for the whole run, installed before the lock is taken.

    While the lock is awaited a signal stops the wait; between the lock and the child's
    start it is kept (the child is then not started); once the child runs it is passed on
    to the child. There is no moment at which a signal kills the supervisor with the
    default action while its child runs on: that is how a child used to be orphaned, its
    lock expiring under it (a ``celery beat`` found running, parent pid 1, after the suite).
    """

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.received: int | None = None
        self.interruptible = False
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _Signals:
        # Handlers can only be set from the main thread (the command's case).
        if threading.current_thread() is threading.main_thread():
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in FORWARDED}
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def started(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        if self.received is not None:  # arrived while the child was being started
            child.send_signal(self.received)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.child is not None:
            if self.child.poll() is None:
                self.child.send_signal(signum)
            return
        self.received = signum
        if self.interruptible:
            raise _Stopped(signum)


def run_locked(options: RunOptions, say: Callable[[str], None], warn: Callable[[str], None]) -> int:
    """Take the lock, run the child while holding it, release; return the exit status."""
    _check(options)
    wake = threading.Event()
    lock = Lock(
        options.name,
        ttl=options.ttl,
        watchdog=True,
        fencing=True,
        connection=options.connection,
        purpose=f"redislock run {' '.join(options.command)}"[:200],
        on_lost=lambda _lock: wake.set(),
        reentrant=False,  # one run, one holder
    )
    with _Signals() as signals:
        waiting = options.on_busy == "wait"
        signals.interruptible = True
        try:
            timeout = options.lock_timeout if waiting else None
            acquired = lock.acquire(blocking=waiting, timeout=timeout)
            signals.interruptible = False
        except _Stopped:
            acquired = False
        if signals.received is not None:  # stopped before the child started: do not start it
            if lock.token is not None:
                lock.release()
            warn(f"Stopped by {signal.Signals(signals.received).name}: the command was not run.")
            return exit_status(-signals.received)
        if not acquired:
            return _busy(options, lock, say, warn)
        try:
            child = _start(options, lock)
        except OSError as exc:
            lock.release()
            warn(f"Could not start {options.command[0]!r}: {exc}")
            return 127
        signals.started(child)
        lost = _supervise(child, lock, wake, options.grace, warn)
        # What the child left running in its process group goes before the lock does.
        _stop_leftovers(child.pid, options.grace, warn)
        # The child and its group are gone: only now may the next holder start. (Still
        # inside the handlers: a late SIGTERM must not kill us before the release.)
        try:
            lock.release()
        except LockNotOwned:
            lost = True
    if lost:
        warn(f"Lost lock {options.name!r} while the command ran; it was stopped.")
        return EXIT_LOST
    return exit_status(child.returncode)


def _check(options: RunOptions) -> None:
    if not options.command:
        raise ValueError("no command to run: write it after '--'")
    if options.on_busy not in ON_BUSY:
        raise ValueError(f"on_busy must be one of {', '.join(ON_BUSY)}, not {options.on_busy!r}")
    if options.grace < 0:
        raise ValueError(f"grace must be >= 0, not {options.grace!r}")


def _start(options: RunOptions, lock: Lock) -> subprocess.Popen[bytes]:
    """The command, told its lock's name and fence in its environment."""
    return subprocess.Popen(
        list(options.command),
        env={**os.environ, "REDISLOCK_NAME": options.name, "REDISLOCK_FENCE": str(lock.fence)},
        start_new_session=True,  # it gets our signals once, from us; its group is its own
    )


def _busy(
    options: RunOptions, lock: Lock, say: Callable[[str], None], warn: Callable[[str], None]
) -> int:
    # The same description of the holder as LockedCommand's busy message.
    message = describe_holder(options.name, holder_info(lock))
    if options.on_busy == "skip":
        say(f"{message} Not run: skipped (--on-busy skip).")
        return 0
    waited = f" after waiting {options.lock_timeout:g}s" if options.on_busy == "wait" else ""
    warn(f"{message} Not run{waited}.")
    return EXIT_BUSY


def _supervise(
    child: subprocess.Popen[bytes],
    lock: Lock,
    wake: threading.Event,
    grace: float,
    warn: Callable[[str], None],
) -> bool:
    """Wait for the child; stop it if the lock is lost. True when the lock was lost."""

    def reaped() -> None:
        child.wait()
        wake.set()

    threading.Thread(target=reaped, name="redislock-run-child", daemon=True).start()
    renew_interval = lock.ttl / 3
    while True:
        wake.clear()  # before looking: a wake-up after the look is not missed
        if child.poll() is not None:
            return lock.lost
        # lost also turns True when the local validity ran out (a starved watchdog).
        if lock.lost:
            warn(f"Lock {lock.name!r} lost: stopping the command (SIGTERM).")
            _stop(child, grace, warn)
            return True
        wake.wait(renew_interval)


def _stop(child: subprocess.Popen[bytes], grace: float, warn: Callable[[str], None]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(grace)
    except subprocess.TimeoutExpired:
        warn(f"The command did not exit within {grace:g}s of SIGTERM: SIGKILL.")
        _kill_group(child.pid)
        child.wait()


def _kill_group(group: int, sig: int = signal.SIGKILL) -> None:
    # PermissionError: a member runs as another user (setuid); the rest still get it.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _stop_leftovers(group: int, grace: float, warn: Callable[[str], None]) -> None:
    """Stop what the child left in its process group: SIGTERM, then SIGKILL after ``grace``.

    The child was its group's leader (``start_new_session``), so a grandchild it forked
    and did not wait for (``cmd &`` in a script, a worker pool) is found here; a process
    that left the group (``setsid``, a daemonizing program) is out of reach.
    """
    if not _group_alive(group):
        return
    warn(
        "The command exited leaving processes in its process group: SIGTERM"
        f" (SIGKILL after {grace:g}s)."
    )
    _kill_group(group, signal.SIGTERM)
    # Not our children: nothing to wait on but their absence.
    if _until_gone(group, grace):
        return
    warn(f"Processes of the command's group outlived SIGTERM by {grace:g}s: SIGKILL.")
    _kill_group(group)
    if not _until_gone(group, KILL_WAIT):
        warn(f"Processes of the command's group survived SIGKILL for {KILL_WAIT:g}s.")


def _until_gone(group: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _group_alive(group):
        if time.monotonic() >= deadline:
            return False
        time.sleep(GROUP_POLL)
    return True


def _group_alive(group: int) -> bool:
    """Whether a live (not zombie) process is in ``group``."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True  # no /proc: a zombie awaiting its reaper counts as alive
    for stat in proc.glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after ")".
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == group and fields[0] not in ("Z", "X"):
            return True
    return False
