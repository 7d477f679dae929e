"""Hot lock families: what each family went through over a window of the history
(``REDISLOCK["HISTORY"]``), ranked by the total time spent waiting for it. The admin's
Hot locks page and ``redislock top`` show it."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .history import LockEvent


def percentile(values: list[float], share: float) -> float | None:
    """The nearest-rank percentile of ``values`` (``share`` in 0..1), ``None`` if empty."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclass
class FamilyStats:
    """What one lock family went through over the window."""

    family: str
    kinds: Counter[str] = field(default_factory=Counter)
    acquisitions: int = 0
    timeouts: int = 0
    lost: int = 0
    waits: list[float] = field(default_factory=list)
    holds: list[float] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return self.kinds.most_common(1)[0][0] if self.kinds else ""

    @property
    def total_wait(self) -> float:
        return sum(self.waits)

    def wait(self, share: float) -> float | None:
        return percentile(self.waits, share)

    def hold(self, share: float) -> float | None:
        return percentile(self.holds, share)


def hot_families(events: Iterable[LockEvent]) -> list[FamilyStats]:
    """Families ranked by total wait (then acquisitions); a timed-out wait counts too."""
    families: dict[str, FamilyStats] = {}
    for event in events:
        stats = families.setdefault(event.family, FamilyStats(event.family))
        stats.kinds[event.kind] += 1
        if event.event == "acquired":
            stats.acquisitions += 1
            stats.waits.append(event.waited or 0.0)
        elif event.event == "timed_out":
            stats.timeouts += 1
            stats.waits.append(event.waited or 0.0)
        elif event.event in ("released", "lost") and event.held is not None:
            stats.holds.append(event.held)
        if event.event in ("lost", "force_released"):
            stats.lost += 1
    return sorted(families.values(), key=lambda s: (-s.total_wait, -s.acquisitions, s.family))


def seconds_text(value: float | None) -> str:
    """``—``, ``12 ms``, ``3.4 s``, ``5 min``."""
    if value is None:
        return "—"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.1f} s"
    return f"{value / 60:.0f} min"


__all__ = ["FamilyStats", "hot_families", "percentile", "seconds_text"]
