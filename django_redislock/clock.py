"""The one clock of every lock: monotonic seconds for timeouts, validity and renewals.

Its own module so that the lock, the watchdog and Redlock read the same clock
without importing one another.
"""

from __future__ import annotations

import time
from collections.abc import Callable

#: Monotonic seconds (never jumps with the wall clock).
now: Callable[[], float] = time.monotonic

__all__ = ["now"]
