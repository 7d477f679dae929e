"""``manage.py redislock run NAME -- COMMAND``: real supervisor and child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from django_redis import get_redis_connection

from django_redislock import Lock, force_release, lock_info
from django_redislock.supervisor import EXIT_BUSY, EXIT_LOST, exit_status
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parents[1]
MANAGE = [sys.executable, "manage.py", "redislock", "run"]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*MANAGE, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*MANAGE, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def child(code: str) -> list[str]:
    return ["--", sys.executable, "-c", textwrap.dedent(code)]


def wait_for_file(path: Path, timeout: float = 30) -> str:
    """Poll for a file another process writes (no event crosses the process boundary)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.01)
    raise AssertionError(f"{path} was not written within {timeout}s")


def test_exit_code_and_environment_reach_through():
    done = run(
        "job",
        *child("""
            import os, sys
            print(os.environ["REDISLOCK_NAME"], os.environ["REDISLOCK_FENCE"])
            sys.exit(3)
        """),
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.split() == ["job", "1"]
    assert lock_info("job") is None  # released after the child exited


def test_a_child_killed_by_a_signal_exits_128_plus_n():
    done = run("job", *child("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert done.returncode == 128 + signal.SIGKILL == exit_status(-signal.SIGKILL)
    assert lock_info("job") is None


def test_busy_error_skip_and_wait():
    holder = Lock("busy", ttl=30, purpose="the nightly job")
    assert holder.acquire(blocking=False)
    refused = run("busy", *child("print('ran')"))
    assert refused.returncode == EXIT_BUSY
    assert "the nightly job" in refused.stderr and "ran" not in refused.stdout
    skipped = run("busy", "--on-busy", "skip", *child("print('ran')"))
    assert skipped.returncode == 0 and "skipped" in skipped.stdout and "ran" not in skipped.stdout
    timed_out = run("busy", "--on-busy", "wait", "--lock-timeout", "0.2", *child("print('ran')"))
    assert timed_out.returncode == EXIT_BUSY and "after waiting 0.2s" in timed_out.stderr
    waiting = start("busy", "--on-busy", "wait", "--lock-timeout", "30", *child("print('ran')"))
    holder.release()  # the waiter is woken by the release (or finds it free)
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out.strip() == "ran"


CHILD_THAT_TRAPS = """
    import os, pathlib, signal, sys, time
    log = pathlib.Path(sys.argv[1])
    mode = sys.argv[2]
    def on_term(signum, frame):
        if mode == "ignore":
            return
        log.write_text(log.read_text() + f"term {time.monotonic_ns()}\\n")
        time.sleep(0.3)  # shutting down takes a while; the lock must wait for it
        log.write_text(log.read_text() + f"exit {time.monotonic_ns()}\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    log.write_text(f"started {os.getpid()}\\n")
    while True:
        time.sleep(0.05)
"""


def trap_child(log: Path, mode: str) -> list[str]:
    return ["--", sys.executable, "-c", textwrap.dedent(CHILD_THAT_TRAPS), str(log), mode]


def test_lost_lock_stops_the_child_and_exits_76(tmp_path):
    log = tmp_path / "child.log"
    proc = start("lost", "--ttl", "1", "--grace", "5", *trap_child(log, "trap"))
    wait_for_file(log)
    assert force_release("lost")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_LOST, err
    assert "lost" in err.lower()
    assert "term " in log.read_text() and "exit " in log.read_text()


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    log = tmp_path / "child.log"
    proc = start("lost", "--ttl", "1", "--grace", "0.5", *trap_child(log, "ignore"))
    pid = int(wait_for_file(log).split()[1])
    assert force_release("lost")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_LOST, err
    assert "SIGKILL" in err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_sigterm_reaches_the_child_and_the_lock_waits_for_its_exit(tmp_path):
    log = tmp_path / "child.log"
    proc = start("graceful", "--ttl", "5", *trap_child(log, "trap"))
    wait_for_file(log)
    waiter = Lock("graceful", ttl=5)
    got: list[tuple[bool, int]] = []
    thread = threading.Thread(
        target=lambda: got.append((waiter.acquire(timeout=30), time.monotonic_ns()))
    )
    thread.start()
    client = get_redis_connection("default")
    assert wait_until(lambda: client.exists(waiter.keys.claim))  # next in turn
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    thread.join(30)
    assert proc.returncode == 0, err  # the child's own exit status
    ((acquired, acquired_at),) = got  # handed over by the release
    assert acquired
    lines = dict(line.split() for line in log.read_text().splitlines())
    assert int(lines["term"]) < int(lines["exit"]) < acquired_at
    waiter.release()
    assert lock_info("graceful") is None


GATED_CHILD = """
    import os, pathlib, signal, sys, time
    log, gate = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    def on_term(signum, frame):
        log.write_text(log.read_text() + "term\\n")
        while not gate.exists():  # stopping takes as long as the test says
            time.sleep(0.01)
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
    log.write_text(f"started {os.getpid()}\\n")
    while True:
        time.sleep(0.05)
"""


def test_a_child_slow_to_stop_keeps_the_supervisor_and_the_lock(tmp_path):
    log, gate = tmp_path / "child.log", tmp_path / "gate"
    proc = start(
        "slow-stop", "--ttl", "1", "--",
        sys.executable, "-c", textwrap.dedent(GATED_CHILD), str(log), str(gate),
    )  # fmt: skip
    pid = int(wait_for_file(log).split()[1])
    proc.send_signal(signal.SIGTERM)
    assert wait_until(lambda: "term" in log.read_text(), 30)
    # The child is still stopping: the supervisor waits for it and the lock stays held.
    assert lock_info("slow-stop") is not None and proc.poll() is None
    gate.write_text("go\n")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone before the supervisor exited
    assert lock_info("slow-stop") is None


FORKING_CHILD = """
    import pathlib, signal, subprocess, sys
    log, mode = pathlib.Path(sys.argv[1]), sys.argv[2]
    grandchild = subprocess.Popen([sys.executable, "-c", (
        "import signal, sys, time\\n"
        + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n" if mode == "ignore" else "")
        + "sys.stdout.write('ready\\\\n'); sys.stdout.flush()\\n"
        + "time.sleep(600)\\n"
    )], stdout=subprocess.PIPE, text=True)
    grandchild.stdout.readline()  # its SIGTERM disposition is set
    log.write_text(f"grandchild {grandchild.pid}\\n")
    sys.exit(4)  # without waiting for it
"""


@pytest.mark.parametrize(("mode", "signal_seen"), [("plain", "SIGTERM"), ("ignore", "SIGKILL")])
def test_a_grandchild_left_behind_is_stopped_before_the_lock_goes(tmp_path, mode, signal_seen):
    log = tmp_path / "child.log"
    done = run(
        "forks", "--grace", "0.5", "--",
        sys.executable, "-c", textwrap.dedent(FORKING_CHILD), str(log), mode,
    )  # fmt: skip
    assert done.returncode == 4, done.stderr  # still the child's own exit status
    grandchild = int(log.read_text().split()[1])
    assert _gone(grandchild), f"grandchild {grandchild} outlived the supervisor"
    assert "leaving processes in its process group" in done.stderr
    assert signal_seen in done.stderr
    assert lock_info("forks") is None


def _gone(pid: int) -> bool:
    """Not running: absent, or a zombie its new parent has not reaped yet."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.mark.slow
def test_a_sigterm_as_the_child_starts_never_orphans_it():
    """The orphaned ``celery beat`` after a CI run: SIGTERM right after the child appeared
    used to kill the supervisor (default action, no handler yet) and leave the child
    running in its own session, its lock expiring. Old code: 8 orphans in 10 tries."""
    import psutil

    for attempt in range(5):
        proc = start(f"race-{attempt}", "--ttl", "2", *child("import time; time.sleep(600)"))
        supervisor = psutil.Process(proc.pid)
        assert wait_until(lambda supervisor=supervisor: supervisor.children(), 30, 0.001)
        children = supervisor.children()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert all(_gone(c.pid) for c in children), [c.cmdline() for c in children]
        assert lock_info(f"race-{attempt}") is None


def test_sigterm_while_waiting_for_the_lock_stops_without_running(tmp_path):
    holder = Lock("awaited", ttl=30)
    assert holder.acquire(blocking=False)
    ran = tmp_path / "ran"
    proc = start(
        "awaited", "--on-busy", "wait", "--",
        sys.executable, "-c", f"open({str(ran)!r}, 'w').close()",
    )  # fmt: skip
    redis = get_redis_connection("default")
    channel = holder.keys.channel
    # Waiting: subscribed to the lock's release channel.
    assert wait_until(lambda: dict(redis.pubsub_numsub(channel)).get(channel.encode()), 30)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "Stopped by SIGTERM: the command was not run" in err
    assert not ran.exists()
    assert lock_info("awaited").token == holder.token  # still the holder's
    holder.release()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["job"], "no command to run"),
        (["job", "--grace", "-1", "--", "true"], "grace must be >= 0"),
        (["job", "--on-busy", "later", "--", "true"], "invalid choice: 'later'"),
    ],
)
def test_bad_input_is_named(args, message):
    done = run(*args)
    assert done.returncode != 0
    assert message in done.stderr
