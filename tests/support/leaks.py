"""Processes the test run started and left running, found at its end.

Every process the run starts inherits :data:`MARK_ENV` from the pytest process that set it
(servers, workers, ``redislock run`` children and their children, demo sites, xdist
workers and all they start), and keeps it when its parent dies: an orphan adopted by pid 1
is still recognised by its environment. At the end of the run, the pytest process that set
the mark gives what still carries it a few seconds to exit (xdist workers shutting down),
then names what is left, kills it and fails the run (``tests/support/plugin.py``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

import psutil

#: Set once per run by the first pytest process; inherited by everything it starts.
MARK_ENV = "REDISLOCK_TEST_RUN"
#: How long processes carrying the mark get to exit on their own at the end of the run.
EXIT_GRACE = float(os.environ.get("REDISLOCK_TEST_EXIT_GRACE", "15"))


@dataclass(frozen=True)
class Leak:
    pid: int
    ppid: int
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid} (parent {self.ppid}): {self.cmdline}"


def carriers(mark: str) -> list[psutil.Process]:
    """Live processes (zombies excluded) other than this one whose environment has ``mark``."""
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE or _own_resource_tracker(proc):
                continue
            if proc.environ().get(MARK_ENV) == mark:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def left_running(mark: str, grace: float = EXIT_GRACE) -> list[Leak]:
    """What still carries ``mark`` after ``grace`` seconds, killed; described."""
    deadline = time.monotonic() + grace
    procs = carriers(mark)
    while procs and time.monotonic() < deadline:
        # Not our children (orphans, grandchildren): nothing to wait on but their absence.
        _, procs = psutil.wait_procs(procs, timeout=min(0.2, max(deadline - time.monotonic(), 0)))
        procs = [p for p in procs if _alive(p)]
    leaks = []
    for proc in procs:
        try:
            leaks.append(Leak(proc.pid, proc.ppid(), " ".join(proc.cmdline())[:300]))
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(procs, timeout=5)
    return leaks


def _own_resource_tracker(proc: psutil.Process) -> bool:
    """multiprocessing's resource tracker of this very process (a test used a "spawn"
    context): it lives as long as this process and ends with it, nothing left behind."""
    return proc.ppid() == os.getpid() and "multiprocessing.resource_tracker" in " ".join(
        proc.cmdline()
    )


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
