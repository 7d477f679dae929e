"""Small statistics helpers (no numpy needed)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of ``values`` (``pct`` in 0..100); NaN when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


def median(values: Sequence[float]) -> float:
    """Median ignoring NaN; NaN when nothing is left."""
    clean = [v for v in values if not math.isnan(v)]
    return float(statistics.median(clean)) if clean else math.nan


def jain(counts: Sequence[float]) -> float:
    """Jain's fairness index: 1.0 when every process got the same share, 1/n at worst."""
    total = sum(counts)
    squares = sum(c * c for c in counts)
    if not counts or squares == 0:
        return math.nan
    return total * total / (len(counts) * squares)


def fmt(value: float, digits: int = 1) -> str:
    """Format a number for a table; "-" for NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 1000 and digits <= 1:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"
