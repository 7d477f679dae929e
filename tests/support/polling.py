"""Waiting for a state that no event announces (a key expiring in Redis, a line another
process writes): poll it, within a bound."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.01
) -> bool:
    """True as soon as ``predicate()`` is true; its last value's truth after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
