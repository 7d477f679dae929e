"""The Grafana dashboard's panels as an HTML page, evaluated over one scrape.

Not Grafana: the layout comes from the JSON's ``gridPos``, and each target's query is
evaluated here over the samples of one scrape, in the few forms the dashboard uses:
``sum by (...) (rate(metric{...}[...]))`` and ``increase(...)`` become totals since the
process started (one scrape has no rate), ``histogram_quantile(q, sum by (..., le)
(rate(metric_bucket{...}[...])))`` interpolates in the buckets as Prometheus does, a
gauge is its value. ``docs/observability.md`` says so under the picture.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import defaultdict
from pathlib import Path

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _matchers(expr: str) -> dict[str, str]:
    # Exact matchers only: the dashboard's =~ "$variable" ones select everything here.
    return dict(re.findall(r"([a-z_]+)=\"([^\"$]*)\"", expr))


def _groups(expr: str) -> list[str]:
    found = re.findall(r"by \(([^)]*)\)", expr)
    return [label.strip() for label in found[0].split(",")] if found else []


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile over cumulative (le, count) buckets."""
    buckets.sort()
    total = buckets[-1][1] if buckets else 0.0
    if total == 0:
        return math.nan
    rank = q * total
    lower_le, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower_le
            width = count - lower_count
            return lower_le + (le - lower_le) * ((rank - lower_count) / width if width else 0)
        lower_le, lower_count = le, count
    return lower_le


def evaluate(expr: str, samples: Samples) -> dict[tuple[str, ...], float]:
    """Group values -> value for one of the dashboard's queries."""
    name = re.findall(r"\b(redislock_[a-z_]+)", expr)[0]
    want = _matchers(expr)
    by = [label for label in _groups(expr) if label != "le"]
    quantile = re.match(r"histogram_quantile\(([0-9.]+),", expr)
    sums: dict[tuple[str, ...], float] = defaultdict(float)
    buckets: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for (sample, labels), value in samples.items():
        if sample != name:
            continue
        labelled = dict(labels)
        if any(labelled.get(key) != value_ for key, value_ in want.items()):
            continue
        group = tuple(labelled.get(label, "") for label in by)
        if quantile:
            buckets[(*group, labelled["le"])].append((0.0, value))
        else:
            sums[group] += value
    if not quantile:
        return dict(sums)
    merged: dict[tuple[str, ...], list[tuple[float, float]]] = defaultdict(list)
    for key, values in buckets.items():
        merged[key[:-1]].append((float(key[-1]), sum(v for _, v in values)))
    q = float(quantile.group(1))
    return {group: _quantile(q, points) for group, points in merged.items()}


def _legend(template: str, by: list[str], group: tuple[str, ...]) -> str:
    labels = dict(zip(by, group, strict=False))
    return re.sub(r"\{\{(\w+)\}\}", lambda m: labels.get(m.group(1), ""), template)


def _format(value: float, unit: str) -> str:
    if math.isnan(value):
        return "no data"
    if unit == "s":
        return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:,.0f}"


def render(dashboard_path: Path, samples: Samples) -> str:
    """The page: one box per panel where its gridPos puts it, a bar per series."""
    dashboard = json.loads(dashboard_path.read_text(encoding="utf-8"))
    boxes = []
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        unit = panel["fieldConfig"]["defaults"].get("unit", "short")
        rows: list[tuple[str, float]] = []
        for target in panel["targets"]:
            by = [label for label in _groups(target["expr"]) if label != "le"]
            for group, value in sorted(evaluate(target["expr"], samples).items()):
                rows.append((_legend(target["legendFormat"], by, group), value))
        top = max((v for _, v in rows if not math.isnan(v)), default=0) or 1
        bars = (
            "".join(
                f'<div class="row"><span class="legend">{html.escape(label)}</span>'
                f'<span class="track"><span class="bar" style="width:'
                f'{0 if math.isnan(v) else 100 * v / top:.0f}%"></span></span>'
                f'<span class="value">{_format(v, unit)}</span></div>'
                for label, v in rows
            )
            or '<div class="empty">no data</div>'
        )
        boxes.append(
            f'<section style="grid-column:{grid["x"] + 1}/span {grid["w"]};'
            f'grid-row:{grid["y"] + 1}/span {grid["h"]}"><h2>{html.escape(panel["title"])}</h2>'
            f"{bars}</section>"
        )
    return f"""<!doctype html><html><head><meta charset="utf-8"><style>
body {{ background:#111217; color:#ccccdc; font:13px system-ui, sans-serif; margin:16px; }}
h1 {{ font-size:18px; margin:0 0 4px; }} p {{ margin:0 0 12px; color:#8e8e9e; }}
main {{ display:grid; grid-template-columns:repeat(24, 1fr); grid-auto-rows:21px; gap:8px; }}
section {{ background:#181b1f; border:1px solid #2c3235; border-radius:3px; padding:8px 10px;
  overflow:hidden; }}
h2 {{ font-size:13px; margin:0 0 8px; font-weight:500; }}
.row {{ display:flex; align-items:center; gap:8px; margin:3px 0; }}
.legend {{ flex:0 0 34%; white-space:nowrap; overflow:hidden; text-overflow:ellipsis; }}
.track {{ flex:1 1 auto; }}
.bar {{ display:block; height:10px; background:#73bf69; border-radius:2px; min-width:2px; }}
.value {{ flex:0 0 84px; text-align:right; font-variant-numeric:tabular-nums; }}
.empty {{ color:#8e8e9e; }}
</style></head><body><h1>{html.escape(dashboard["title"])}</h1>
<p>The dashboard's panels over one scrape of a test run (totals since start in place of
rates): drawn by tests/test_dashboard_picture.py, not by Grafana.</p>
<main>{"".join(boxes)}</main></body></html>"""
