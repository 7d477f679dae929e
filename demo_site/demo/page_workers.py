"""What the worker processes started by the demo's pages (Semaphore, Read-write lock)
share: their directory under ``var/``, their state and events files, and how they end.

A worker writes its pid to ``<dir>/<label>.pid``, what it is doing to ``<label>.state``
("<stamp> <state>") and one line per event to ``events.log`` ("<stamp> <label> <text>");
the page reads them back. It exits when the process that started it is gone, or after
``--minutes``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from django.conf import settings


def worker_dir(name: str) -> Path:
    path = Path(settings.VAR_DIR) / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def log_event(directory: Path, label: str, text: str) -> None:
    with open(directory / "events.log", "a") as log:
        log.write(f"{time.time():.3f} {label} {text}\n")


def set_state(directory: Path, label: str, state: str) -> None:
    # Replaced in one step: the page reading it never sees it empty or half-written.
    fresh = directory / f"{label}.state.new"
    fresh.write_text(f"{time.time():.3f} {state}")
    os.replace(fresh, directory / f"{label}.state")


def start(directory: Path, label: str, minutes: float) -> None:
    """Record this worker's pid, and end it with its parent (even while it waits in line)."""
    (directory / f"{label}.pid").write_text(str(os.getpid()))
    parent, stop_at = os.getppid(), time.monotonic() + minutes * 60
    threading.Thread(target=_exit_with, args=(parent, stop_at), daemon=True).start()


def _exit_with(parent: int, stop_at: float) -> None:
    while os.getppid() == parent and time.monotonic() < stop_at:
        time.sleep(0.5)
    os._exit(0)
