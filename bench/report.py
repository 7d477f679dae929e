"""Markdown report and hand-off chart."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Table:
    """One Markdown table."""

    headers: list[str]
    rows: list[list[str]] = field(default_factory=list)
    caption: str = ""

    def render(self) -> str:
        """Return the table as Markdown (caption first, when any)."""
        lines = [f"**{self.caption}**", ""] if self.caption else []
        lines.append("| " + " | ".join(self.headers) + " |")
        lines.append(
            "|" + "|".join("---" if i == 0 else "---:" for i in range(len(self.headers))) + "|"
        )
        lines.extend("| " + " | ".join(row) + " |" for row in self.rows)
        return "\n".join(lines)


@dataclass
class HandoffPoint:
    """Chart input: one library's hand-off figures (µs for gaps, ms for the wait)."""

    label: str
    gap_p50_us: float
    gap_p99_us: float
    longest_wait_ms: float


@dataclass
class Section:
    """What one scenario reports."""

    title: str
    intro: str = ""
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: str | None = None
    chart: list[HandoffPoint] = field(default_factory=list)
    chart_caption: str = ""
    seconds: float = 0.0

    def render(self) -> str:
        """Return the section as Markdown."""
        parts = [f"## {self.title}", ""]
        if self.skipped:
            parts += [f"_Skipped: {self.skipped}_", ""]
            return "\n".join(parts)
        if self.intro:
            parts += [self.intro, ""]
        for table in self.tables:
            parts += [table.render(), ""]
        parts += [f"- {note}" for note in self.notes]
        if self.notes:
            parts.append("")
        parts += [f"_Scenario time: {self.seconds:.1f} s._", ""]
        return "\n".join(parts)


def render_report(header: list[str], sections: list[Section], chart_link: str | None) -> str:
    """Return the whole Markdown document."""
    lines = ["# django-redislock benchmarks", ""]
    lines += header
    lines.append("")
    if chart_link:
        lines += [f"![hand-off gap and longest wait per library]({chart_link})", ""]
    for section in sections:
        lines.append(section.render())
    return "\n".join(lines).rstrip() + "\n"


def write_chart(points: list[HandoffPoint], caption: str, path: Path) -> bool:
    """Draw gap p50/p99 and longest wait per library into ``path``; False when no data."""
    points = [p for p in points if not math.isnan(p.gap_p50_us)]
    if not points:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [p.label for p in points]
    xs = list(range(len(points)))
    fig, (ax_gap, ax_wait) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.38
    ax_gap.bar([x - width / 2 for x in xs], [p.gap_p50_us for p in points], width, label="p50")
    ax_gap.bar([x + width / 2 for x in xs], [p.gap_p99_us for p in points], width, label="p99")
    ax_gap.set_yscale("log")
    ax_gap.set_ylabel("hand-off gap (µs, log)")
    ax_gap.set_title("release → next process's acquire")
    ax_gap.legend()
    ax_wait.bar(xs, [p.longest_wait_ms for p in points], 0.6, color="tab:red")
    ax_wait.set_yscale("log")
    ax_wait.set_ylabel("longest single wait (ms, log)")
    ax_wait.set_title("longest wait for the lock")
    for axis in (ax_gap, ax_wait):
        axis.set_xticks(xs)
        axis.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        axis.grid(axis="y", alpha=0.3)
    fig.suptitle(caption, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
