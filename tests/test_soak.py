"""The mixed-fault soak (``make soak``) in a 30 s form: real worker processes of threads
and asyncio tasks, every kind (``Lock``, ``Redlock``, ``Semaphore``, ``ReadWriteLock``,
``MultiLock``, ``Election``), one random fault at a time; the checkers of
:mod:`tests.soak.checks` find no violation. Each kind's deliberately broken variant
(:mod:`tests.soak.subjects`) is caught by the checker of the protection it switches off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.soak.__main__ import WORKERS

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def soak(tmp_path: Path, *args: str) -> tuple[int, dict, list[str], str]:
    out, keep = tmp_path / "soak.json", tmp_path / "kept"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.soak", "--json", str(out), "--keep", str(keep), *args],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert out.exists(), proc.stderr[-3000:]
    violations = (keep / "violations.txt").read_text().splitlines()
    return proc.returncode, json.loads(out.read_text()), violations, proc.stdout


def only(*kinds: str) -> list[str]:
    """Arguments that leave every other kind out."""
    return [arg for kind in WORKERS if kind not in kinds for arg in (f"--{kind}-workers", "0")]


def test_a_short_soak_of_every_kind_finds_no_violation(tmp_path):
    code, result, violations, report = soak(tmp_path, "--seconds", "30")
    assert violations == [], report
    assert code == 0
    assert sum(result["faults"].values()) >= 10, result["faults"]
    rounds = {kind: counts.get("acquired", 0) for kind, counts in result["kinds"].items()}
    assert set(rounds) == {
        "lock", "redlock", "semaphore", "rwlock (read)", "rwlock (write)", "multilock", "election"
    }, report  # fmt: skip
    assert all(n >= 10 for n in rounds.values()), report


def test_the_soak_catches_a_release_without_the_token_check(tmp_path):
    # Workers stopped past their TTL, then releasing someone else's lock.
    code, _, violations, report = soak(
        tmp_path, "--seconds", "15", "--broken", "--faults", "stop", *only("lock", "redlock")
    )
    assert any("both believed they held it" in v for v in violations), report
    assert code == 0  # with --broken, finding violations is the expected outcome


#: What each broken kind's checker says (see tests/soak/subjects.py for what is broken).
CAUGHT = {
    "a semaphore over its limit": "permits: ",
    "a reader beside a writer": "held it beside reader",
    "readers ahead of a waiting writer": "reader(s) went in before it",
    "a MultiLock holding some of its names": "believed it held every name",
    "a MultiLock part left after its release": "still held by",
    "a term given twice": "leaders: ",
    "terms going back": "held after fence",
}


def test_the_soak_catches_each_broken_kind(tmp_path):
    kinds = ("semaphore", "rwlock", "multilock", "election")
    code, _, violations, report = soak(
        tmp_path, "--seconds", "12", "--broken", "--faults", "stop", *only(*kinds)
    )
    missed = [what for what, says in CAUGHT.items() if not any(says in v for v in violations)]
    assert missed == [], report
    assert code == 0
