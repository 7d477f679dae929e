"""The end-of-run check for processes the suite left running (tests/support/leaks.py).

Each case runs an inner pytest session with the project's plugin on a small test file:
one test leaks a process on purpose, the other starts and stops its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tests.support import leaks, plugin

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow

LEAKING = """
    import os, pathlib, subprocess, sys

    def test_leaks_a_process():
        # In its own session, like a supervisor's child: nothing kills it with pytest.
        proc = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)", "leaked-on-purpose"],
            start_new_session=True,
        )
        pathlib.Path(os.environ["LEAKED_PID_FILE"]).write_text(str(proc.pid))
"""

TIDY = """
    import subprocess, sys

    def test_starts_and_stops_a_process():
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        proc.kill()
        proc.wait()
"""


def inner_run(
    tmp_path: Path, source: str, own_server: bool, *args: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(source))
    # A fresh run: not marked by this one; with a server of its own when asked.
    dropped = {leaks.MARK_ENV, "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS"}
    if own_server:
        dropped |= {plugin.URL_ENV, plugin.DB_ENV, plugin.OWNER_ENV}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(
        PYTHONPATH=str(ROOT),
        REDISLOCK_TEST_EXIT_GRACE="5",  # xdist workers exit within it, even on a busy host
        LEAKED_PID_FILE=str(tmp_path / "leaked.pid"),
    )
    return subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-p", "tests.support.plugin",
            "-p", "no:django", "-p", "no:asyncio", "-p", "no:cacheprovider",
            "--basetemp", str(tmp_path / "base"), *args, "test_inner.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_leaked_process_fails_the_run_by_name(tmp_path: Path, xdist: list[str]) -> None:
    """Under xdist the controller finds what a worker's test left (workers themselves and
    their servers are not reported: they exit within the grace)."""
    done = inner_run(tmp_path, LEAKING, False, *xdist)
    pid = int((tmp_path / "leaked.pid").read_text())
    assert "1 passed" in done.stdout  # the test itself passed ...
    assert done.stdout.count("pid ") == 1, done.stdout
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout + done.stderr
    assert "processes left behind" in done.stdout  # ... the run did not
    assert f"pid {pid} " in done.stdout and "leaked-on-purpose" in done.stdout
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_tidy_run_with_its_own_servers_passes(tmp_path: Path, xdist: list[str]) -> None:
    done = inner_run(tmp_path, TIDY, True, *xdist)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "processes left behind" not in done.stdout
