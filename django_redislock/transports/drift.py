"""The clock-drift margin of a quorum's grant: how long a majority's grant of a TTL may be
trusted, given that the nodes' clocks and ours may run apart (the Redlock algorithm)."""

from __future__ import annotations

import math

#: validity = ttl - elapsed - (ttl * DRIFT_FACTOR + DRIFT_FIXED)
DRIFT_FACTOR = 0.01
DRIFT_FIXED = 0.002


def minimum_ttl() -> float:
    """The shortest TTL (whole milliseconds) whose majority grant can be valid at all: at
    or below ``DRIFT_FIXED / (1 - DRIFT_FACTOR)`` the drift margin eats the whole TTL."""
    return (math.floor(DRIFT_FIXED / (1 - DRIFT_FACTOR) * 1000) + 1) / 1000


def clock_drift(ttl: float) -> float:
    """Seconds of clock drift allowed for a lock of ``ttl`` seconds."""
    return ttl * DRIFT_FACTOR + DRIFT_FIXED


def validity_of(seconds: float) -> float:
    """How long a majority's grant (or renewal) of ``seconds`` may be trusted."""
    return seconds - clock_drift(seconds)


__all__ = ["DRIFT_FACTOR", "DRIFT_FIXED", "clock_drift", "minimum_ttl", "validity_of"]
