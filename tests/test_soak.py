"""The mixed-fault soak (``make soak``) in a 30 s form: real worker processes of threads
and asyncio tasks, ``Lock``, ``Redlock`` and ``Semaphore``, one random fault at a time;
the checkers of :mod:`tests.soak.checks` find no violation. Each deliberately broken kind
(a release without the token check; a semaphore over its limit) is caught."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def soak(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    out = tmp_path / "soak.json"
    proc = subprocess.run(
        [sys.executable, "-m", "tests.soak", "--json", str(out), *args],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert out.exists(), proc.stderr[-3000:]
    return proc.returncode, json.loads(out.read_text()), proc.stdout


def test_a_short_soak_finds_no_violation(tmp_path):
    code, result, report = soak(tmp_path, "--seconds", "30")
    assert result["violations"] == 0, report
    assert code == 0
    assert result["operations"]["acquired"] > 100
    assert sum(result["faults"].values()) >= 10, result["faults"]


def test_the_soak_catches_a_release_without_the_token_check(tmp_path):
    # Workers stopped past their TTL, then releasing someone else's lock.
    code, result, report = soak(
        tmp_path, "--seconds", "15", "--broken", "--faults", "stop", "--semaphore-workers", "0"
    )
    assert result["violations"] > 0, report
    assert any("both believed they held it" in v for v in result["examples"]), report
    assert code == 0  # with --broken, finding violations is the expected outcome


def test_the_soak_catches_a_semaphore_over_its_limit(tmp_path):
    # Its workers ask for one permit more than the name's limit.
    only = ("--lock-workers", "0", "--redlock-workers", "0")
    code, result, report = soak(tmp_path, "--seconds", "10", "--broken", "--faults", "stop", *only)
    assert result["violations"] > 0, report
    assert all("permits" in v for v in result["examples"]), report
    assert code == 0
