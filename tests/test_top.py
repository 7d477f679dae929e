"""``manage.py redislock top``: one snapshot as text (``--once``) and JSON (``--json``),
and the live view driven in tmux: it shows the held lock and its waiter, redraws, quits
on ``q`` and gives the terminal back (docs/admin-and-commands.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_redislock import Lock, history, lock_info
from tests.support.polling import wait_until

ROOT = Path(__file__).resolve().parent.parent


def _top(*args: str) -> str:
    out = StringIO()
    call_command("redislock", "top", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def held_and_waited(real_backend: Any, settings: Any) -> Iterator[tuple[Lock, Lock]]:
    settings.REDISLOCK = {**settings.REDISLOCK, "HISTORY": True}
    history.enable()
    for _ in range(2):
        with Lock("invoice:1", ttl=30):
            pass
    holder = Lock("invoice:7", ttl=30, purpose="billing.pay")
    assert holder.acquire()
    waiter = Lock("invoice:7", ttl=30, purpose="refund")
    thread = threading.Thread(target=lambda: waiter.acquire(timeout=60), name="refunder")
    thread.start()
    assert wait_until(lambda: (lock_info("invoice:7") or holder).waiting == 1, 10)  # type: ignore[union-attr]
    history.flush()
    try:
        yield holder, waiter
    finally:
        holder.release()
        thread.join(60)
        waiter.release()
        history.disable()


def test_once_prints_every_part(held_and_waited: tuple[Lock, Lock]) -> None:
    text = _top("--once")
    assert text.startswith("redislock top · default · ")
    held = text[text.index("Held:") : text.index("Waiting, longest first:")]
    assert "invoice:7" in held and "billing.pay" in held
    waiting = text[text.index("Waiting, longest first:") : text.index("Hot families")]
    assert "invoice:7" in waiting and "refund" in waiting and "/refunder" in waiting
    hot = text[text.index("Hot families") : text.index("Recent events")]
    assert "invoice" in hot
    recent = text[text.index("Recent events") :]
    assert "acquired" in recent and "contended" in recent


def test_json_parses(held_and_waited: tuple[Lock, Lock]) -> None:
    shot = json.loads(_top("--json"))
    assert [h["name"] for h in shot["held"]] == ["invoice:7"]
    assert shot["held"][0]["waiting"] == 1
    [waiting] = shot["waiting"]
    assert waiting["purpose"] == "refund" and waiting["owner"].endswith("/refunder")
    assert waiting["blocked_by"] == [str(lock_info("invoice:7").owner)]  # type: ignore[union-attr]
    [hot] = shot["hot"]
    assert hot["family"] == "invoice" and hot["acquisitions"] == 3
    assert shot["recent"][0]["event"] == "contended" and shot["history_on"] is True


def test_once_without_history(real_backend: Any) -> None:
    with Lock("quiet", ttl=30):
        text = _top("--once")
    assert "quiet" in text and "(REDISLOCK['HISTORY'] is off)" in text


def test_a_bad_interval_is_named(lock_backend: Any) -> None:
    with pytest.raises(CommandError, match="--interval must be a number of seconds > 0"):
        _top("--interval", "0")


def _tmux(session: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    # A tmux server of the test's own (-L): a shared one would start every session with
    # the environment of whichever test started the server.
    return subprocess.run(["tmux", "-L", session, *args], text=True, **kwargs)


def _pane(session: str) -> str:
    return _tmux(session, "capture-pane", "-p", "-t", session, capture_output=True).stdout


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_live_view_in_tmux(held_and_waited: tuple[Lock, Lock], real_backend: Any) -> None:
    session = f"redislock-top-{os.getpid()}"
    env = {
        # Not COLUMNS / LINES (pytest may set them): rich would size to them, not the pane.
        **{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
        "DJANGO_SETTINGS_MODULE": "tests.support.settings",
        "REDISLOCK_TEST_REDIS_URL": real_backend.url,
        "PYTHONPATH": str(ROOT),
        "TERM": "xterm-256color",
    }
    command = f"{sys.executable} -m tests.support.top_runner; echo TOP-EXITED; sleep 30"
    _tmux(session, "new-session", "-d", "-s", session, "-x", "160", "-y", "50", command, env=env)
    try:
        assert wait_until(lambda: "refund" in _pane(session), 30), _pane(session)
        screen = _pane(session)
        assert "invoice:7" in screen and "billing.pay" in screen and "/refunder" in screen
        assert "q to quit" in screen
        first = screen
        assert wait_until(lambda: _pane(session) != first, 10)  # redrawn (the clock moves)
        _tmux(session, "send-keys", "-t", session, "q", check=True)
        assert wait_until(lambda: "TOP-EXITED" in _pane(session), 15), _pane(session)
        # The alternate screen is gone: the live view's tables are no longer on it.
        assert "q to quit" not in _pane(session)
    finally:
        _tmux(session, "kill-server", check=False)
