"""The soak's checkers: each takes the recorded history (and the fault log) and returns
a list of violations, empty when the run was fine.

History lines are the fault suite's (:mod:`tests.faults.harness`), plus ``name`` on every
line and ``error`` lines. Fault records: ``{"type", "start_ns", "end_ns", ...}``; Redis-side
faults carry ``server``, worker faults ``worker`` (the worker id every history ident of
that process starts with), a force-release ``name``, ``token`` and ``fence``.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from tests.faults.harness import NS, Window, check_counter, check_fences

#: Faults on a worker process.
WORKER_FAULTS = ("stop", "kill")
#: Redis-side faults: lock calls may fail while one lasts (and GRACE_NS after).
REDIS_FAULTS = (
    "client-kill-normal",
    "client-kill-pubsub",
    "restart-kill",
    "restart-term",
    "node-hold",
    "node-delay",
    "node-reset",
)
#: Every fault the soak injects; an operator's force-release is one too.
FAULTS = [*WORKER_FAULTS, *REDIS_FAULTS, "force-release"]
#: After a fault ends, calls that were in flight may still fail this long.
GRACE_NS = 1 * NS
#: The soak's Semaphore names and their limits (the workers', unless broken).
SEMAPHORE_LIMITS = {"soak-s2": 2, "soak-s3": 3}
#: The soak's ReadWriteLock names (70 % of their rounds read, 30 % write).
RWLOCK_NAMES = ["soak-rw1", "soak-rw2"]
#: The soak's Election names.
ELECTION_NAMES = ["soak-e1"]
#: A waiting writer has its place in line at its second try, 1 ms after its first; a
#: reader that asks this much later must not go in before it (docs/kinds.md: writers
#: are not starved). Slack for a loaded machine between the two tries.
WRITER_AHEAD_NS = 1 * NS
#: A waiter must get a freed lock within this (the 2 s safety net of a lost wake-up,
#: plus slack for a loaded machine).
NET_NS = 3 * NS


def by_name(history: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in history:
        if line.get("name"):
            out[line["name"]].append(line)
    return out


def _overlaps(start: int, end: int, faults: Iterable[dict[str, Any]], grace: int = 0) -> bool:
    return any(f["start_ns"] <= end and start <= f["end_ns"] + grace for f in faults)


def _worker_of(ident: str) -> str:
    return ident.rsplit("-", 1)[0]


def held_windows(lines: list[dict[str, Any]], force_released: dict[str, int]) -> list[Window]:
    """Believed-valid windows of one name, cut where an operator force-released them.

    The fault suite's ``windows`` in one pass per worker: a window runs from an acquire's
    return to the next release's start (the ``releasing`` line, written before the release
    is sent, so a worker killed mid-release has it) or ``acquire invoke + validity`` (the later
    of the acquire's and the release's validity: renewals), whichever is first.
    """
    out = []
    by_worker: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in lines:
        if line["op"] in ("acquire", "releasing"):  # "releasing": before it is sent
            by_worker[line["worker"]].append(line)
    for worker, ops in by_worker.items():
        ops.sort(key=lambda line: line["invoke_ns"])
        for line, after in itertools.zip_longest(ops, ops[1:]):
            if line["op"] != "acquire" or not line["ok"]:
                continue
            release = after if after is not None and after["op"] == "releasing" else None
            end = float("inf") if release is None else release["invoke_ns"]
            validity = line["validity_ns"]
            if validity is not None:
                if release is not None and release.get("validity_ns") is not None:
                    validity = max(validity, release["validity_ns"])
                end = min(end, line["invoke_ns"] + validity)
            cut = force_released.get(line["token"])
            if cut is not None:
                end = min(end, cut)
            if line["complete_ns"] < end:
                out.append(Window(worker, line["fence"], line["complete_ns"], end))
    return out


def check_exclusion(name: str, spans: list[Window]) -> list[str]:
    """No two believed-valid windows of one name overlap."""
    out = []
    spans = sorted(spans, key=lambda w: w.start)
    for i, a in enumerate(spans):
        for b in spans[i + 1 :]:
            if b.start >= a.end:
                break
            if b.worker != a.worker:
                out.append(
                    f"{name}: {a.worker} (fence {a.fence}) and {b.worker} (fence {b.fence}) "
                    f"both believed they held it for {(min(a.end, b.end) - b.start) / 1e6:.1f} ms"
                )
    return out


def check_limit(name: str, spans: list[Window], limit: int) -> list[str]:
    """At most ``limit`` holders believed they held a permit at any moment."""
    # An end sorts before a start at the same instant: a permit handed straight on.
    edges = sorted(
        [(w.start, 1, i) for i, w in enumerate(spans)]
        + [(w.end, -1, i) for i, w in enumerate(spans)]
    )
    out = []
    inside: set[int] = set()
    for _, step, index in edges:
        if step < 0:
            inside.discard(index)
            continue
        inside.add(index)
        if len(inside) > limit:
            holders = ", ".join(sorted(spans[i].worker for i in inside))
            out.append(
                f"{name}: {len(inside)} holders believed they held one of {limit} "
                f"permits: {holders}"
            )
    return out


def check_writer_exclusion(name: str, writers: list[Window], readers: list[Window]) -> list[str]:
    """A writer's believed-valid window overlaps no other holder's, reader or writer."""
    everyone = writers + readers
    writing = set(range(len(writers)))  # indexes into everyone (a Window is unhashable)
    # An end sorts before a start at the same instant: a lock handed straight on.
    edges = sorted(
        [(w.start, 1, i) for i, w in enumerate(everyone)]
        + [(w.end, -1, i) for i, w in enumerate(everyone)]
    )
    out = []
    inside: set[int] = set()
    for _, step, index in edges:
        if step < 0:
            inside.discard(index)
            continue
        new = everyone[index]
        for other_index in inside:
            other = everyone[other_index]
            if other.worker == new.worker or not {index, other_index} & writing:
                continue
            writer, holder = (new, other) if index in writing else (other, new)
            role = "writer" if {index, other_index} <= writing else "reader"
            out.append(
                f"{name}: writer {writer.worker} (fence {writer.fence}) held it beside "
                f"{role} {holder.worker} (fence {holder.fence})"
            )
        inside.add(index)
    return out


def check_writer_starvation(
    name: str, lines: list[dict[str, Any]], faults: list[dict[str, Any]]
) -> list[str]:
    """No reader that asked ``WRITER_AHEAD_NS`` after a waiting writer went in before it,
    unless a fault (Redis-side, or the writer's own process stopped: its place lapsed)
    overlapped the writer's wait."""
    out = []
    acquires = [line for line in lines if line["op"] == "acquire"]
    readers = sorted(
        (line["complete_ns"], line["invoke_ns"], line["worker"])
        for line in acquires
        if line["mode"] == "read" and line["ok"]
    )
    redis_faults = [f for f in faults if f["type"] in REDIS_FAULTS]
    for writer in acquires:
        if writer["mode"] != "write":
            continue
        late = writer["invoke_ns"] + WRITER_AHEAD_NS
        first = bisect.bisect_right(readers, (late,))
        last = bisect.bisect_left(readers, (writer["complete_ns"],))
        ahead = [r for r in readers[first:last] if r[1] > late]
        if not ahead:
            continue
        span = (writer["invoke_ns"], writer["complete_ns"])
        own = [f for f in faults if f.get("worker") == _worker_of(writer["worker"])]
        if _overlaps(*span, redis_faults, GRACE_NS) or _overlaps(*span, own):
            continue
        asked = (ahead[0][1] - writer["invoke_ns"]) / 1e9
        out.append(
            f"{name}: writer {writer['worker']} waited {(span[1] - span[0]) / 1e9:.2f}s; "
            f"{len(ahead)} reader(s) went in before it, the first ({ahead[0][2]}) having "
            f"asked {asked:.2f}s after it"
        )
    return out


def check_terms(name: str, spans: list[Window]) -> list[str]:
    """At most one believed leader per term (terms strictly growing: check_fence_order)."""
    leaders: dict[int | None, set[str]] = defaultdict(set)
    for span in spans:
        leaders[span.fence].add(span.worker)
    return [
        f"{name}: term {term} had {len(who)} leaders: {', '.join(sorted(who))}"
        for term, who in sorted(leaders.items(), key=lambda item: item[0] or 0)
        if len(who) > 1
    ]


def check_multilocks(history: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[str]:
    """A MultiLock that acquired holds every name (``parts`` lines), and no part of one is
    still held after its release (``leftover`` lines: at once after a release that
    returned, a TTL later after one that raised)."""
    out = []
    redis_faults = [f for f in faults if f["type"] in REDIS_FAULTS]
    for line in history:
        if line["op"] == "parts" and line["missing"]:
            span = (line["invoke_ns"] - GRACE_NS, line["complete_ns"])
            own = [f for f in faults if f.get("worker") == _worker_of(line["worker"])]
            taken = [f for f in faults if f.get("name") in line["missing"]]  # force-release
            if any(_overlaps(*span, group, GRACE_NS) for group in (redis_faults, own, taken)):
                continue
            out.append(
                f"{line['multi']}: {line['worker']} believed it held every name; "
                f"{', '.join(line['missing'])} not held"
            )
        elif line["op"] == "leftover" and line["held"]:
            out.append(
                f"{line['multi']}: {', '.join(line['held'])} still held by "
                f"{line['worker']} after its release"
            )
    return out


def check_fence_order(name: str, spans: list[Window]) -> list[str]:
    """Holders that believed in turn got strictly growing fences."""
    out = []
    ordered = sorted(spans, key=lambda w: w.start)
    for a, b in itertools.pairwise(ordered):
        if a.fence is not None and b.fence is not None and b.fence <= a.fence:
            out.append(f"{name}: fence {b.fence} ({b.worker}) held after fence {a.fence}")
    return out


def check_liveness(
    name: str, lines: list[dict[str, Any]], faults: list[dict[str, Any]]
) -> list[str]:
    """No waiter sleeps past a freed lock beyond the safety net.

    After a release that freed the lock while a waiter had more than ``NET_NS`` of its
    timeout left, some acquire of that name completes within ``NET_NS`` — unless a fault
    (Redis-side, or a worker stopped or killed: it may have been the heir) overlapped.
    """
    out = []
    acquires = [line for line in lines if line["op"] == "acquire"]
    granted = sorted(line["complete_ns"] for line in acquires if line["ok"])
    for release in lines:
        if release["op"] != "release" or release["outcome"] != "released":
            continue
        freed = release["complete_ns"]
        next_grant = bisect.bisect_right(granted, freed)
        if next_grant < len(granted) and granted[next_grant] <= freed + NET_NS:
            continue  # the usual case, checked first: someone got it in time
        if _overlaps(freed, freed + NET_NS, faults, GRACE_NS):
            continue
        waiting = [
            a for a in acquires
            if not a.get("multi")  # a MultiLock waits for all its names, not this one
            and a["invoke_ns"] < freed < a["complete_ns"]
            and a["invoke_ns"] + a["timeout"] * NS > freed + NET_NS
        ]  # fmt: skip
        if not waiting:
            continue
        out.append(
            f"{name}: freed at {freed / 1e9:.3f}s with {len(waiting)} waiter(s), "
            f"none got it within {NET_NS / 1e9:g}s"
        )
    return out


def check_errors(history: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[str]:
    """No unexpected exception; no LockBackendUnavailable while Redis was up."""
    out = []
    redis_faults = [f for f in faults if f["type"] in REDIS_FAULTS]
    for line in history:
        if line["op"] != "error":
            continue
        where = f"{line['worker']} {line['during']} {line['name']}: {line['error']}"
        if not line["expected"]:
            out.append(f"unexpected exception: {where}: {line['message']}")
        elif line["error"] == "LockBackendUnavailable":
            span = (line["invoke_ns"], line["complete_ns"])
            own = [f for f in faults if f.get("worker") == _worker_of(line["worker"])]
            if not _overlaps(*span, redis_faults, GRACE_NS) and not _overlaps(*span, own):
                out.append(f"Redis unavailable while it was up: {where}: {line['message']}")
    return out


def check_stale_grants(history: list[dict[str, Any]], faults: list[dict[str, Any]]) -> list[str]:
    """acquire() never returns a lock whose validity already ran out."""
    out = []
    for line in history:
        if line["op"] != "acquire" or not line["ok"] or line["validity_ns"] is None:
            continue
        if line["invoke_ns"] + line["validity_ns"] > line["complete_ns"]:
            continue
        own = [f for f in faults if f.get("worker") == _worker_of(line["worker"])]
        if _overlaps(line["invoke_ns"], line["complete_ns"], own):
            continue  # paused between the return and the record
        out.append(
            f"acquire returned an already lost lock: {line['worker']} {line['name']} "
            f"fence {line['fence']}"
        )
    return out


def check_all(
    history: list[dict[str, Any]],
    faults: list[dict[str, Any]],
    resources: dict[str, Any],
) -> list[str]:
    """Every checker over the whole run."""
    force_released: dict[str, dict[str, int]] = defaultdict(dict)  # name -> token -> when
    for fault in faults:
        if fault["type"] == "force-release":
            force_released[fault["name"]][fault["token"]] = fault["start_ns"]
    violations = []
    for name, lines in sorted(by_name(history).items()):
        spans = held_windows(lines, force_released[name])
        if name in SEMAPHORE_LIMITS:
            violations += check_limit(name, spans, SEMAPHORE_LIMITS[name])
        elif name in RWLOCK_NAMES:
            side = {
                mode: [line for line in lines if line["mode"] == mode] for mode in ("read", "write")
            }
            writers = held_windows(side["write"], force_released[name])
            readers = held_windows(side["read"], force_released[name])
            violations += check_writer_exclusion(name, writers, readers)
            violations += check_fence_order(name, writers)
            violations += check_writer_starvation(name, lines, faults)
        else:
            violations += check_exclusion(name, spans)
            violations += check_fence_order(name, spans)
            if name in ELECTION_NAMES:
                violations += check_terms(name, spans)
        violations += check_liveness(name, lines, faults)
    for name, resource in sorted(resources.items()):
        accepted = resource.accepted()
        violations += check_fences(accepted, f"resource {name}")
        violations += check_counter(resource.read(), accepted, f"resource {name}")
    violations += check_multilocks(history, faults)
    violations += check_errors(history, faults)
    violations += check_stale_grants(history, faults)
    return violations
