"""Run a child process only while holding a lock: ``manage.py redislock run``.

The child starts after the lock is taken (with a watchdog), learns the lock's name and
fence from its environment, and the lock is released only after the child has exited.
If the lock is lost while the child runs, the child gets SIGTERM, then SIGKILL after the
grace period. SIGTERM and SIGINT sent to the supervisor are passed on to the child.

The hazard this cannot remove: a supervisor that is frozen (SIGSTOP, a paused VM) stops
renewing, another host takes the lock, and this child keeps running meanwhile. The
fence in ``REDISLOCK_FENCE`` is how the child's writes can be refused (docs/election.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

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


def run_locked(options: RunOptions, say: Callable[[str], None], warn: Callable[[str], None]) -> int:
    """Take the lock, run the child while holding it, release; return the exit status."""
    if not options.command:
        raise ValueError("no command to run: write it after '--'")
    if options.on_busy not in ON_BUSY:
        raise ValueError(f"on_busy must be one of {', '.join(ON_BUSY)}, not {options.on_busy!r}")
    if options.grace < 0:
        raise ValueError(f"grace must be >= 0, not {options.grace!r}")
    wake = threading.Event()
    lock = Lock(
        options.name,
        ttl=options.ttl,
        watchdog=True,
        fencing=True,
        connection=options.connection,
        purpose=f"redislock run {' '.join(options.command)}"[:200],
        on_lost=lambda _lock: wake.set(),
    )
    waiting = options.on_busy == "wait"
    if not lock.acquire(blocking=waiting, timeout=options.lock_timeout if waiting else None):
        return _busy(options, lock, say, warn)
    try:
        child = subprocess.Popen(
            list(options.command),
            env={**os.environ, "REDISLOCK_NAME": options.name, "REDISLOCK_FENCE": str(lock.fence)},
            start_new_session=True,  # it gets our signals once, from us
        )
    except OSError as exc:
        lock.release()
        warn(f"Could not start {options.command[0]!r}: {exc}")
        return 127
    lost = _supervise(child, lock, wake, options.grace, warn)
    # The child is gone: only now may the next holder start.
    try:
        lock.release()
    except LockNotOwned:
        lost = True
    if lost:
        warn(f"Lost lock {options.name!r} while the command ran; it was stopped.")
        return EXIT_LOST
    return exit_status(child.returncode)


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

    def forward(signum: int, frame: FrameType | None) -> None:
        if child.poll() is None:
            child.send_signal(signum)

    # Signal handlers can only be set from the main thread (the command's case).
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED} if main else {}
    try:
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
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(child: subprocess.Popen[bytes], grace: float, warn: Callable[[str], None]) -> None:
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
    try:
        child.wait(grace)
    except subprocess.TimeoutExpired:
        warn(f"The command did not exit within {grace:g}s of SIGTERM: SIGKILL.")
        child.kill()
        child.wait()
