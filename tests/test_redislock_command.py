"""``manage.py redislock list|inspect|release`` (DESIGN §2, issue 5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_redislock import Lock, lock_info
from django_redislock.management.commands import redislock as command_module
from django_redislock.signals import lock_force_released
from tests.test_inspect import add_junk, hold_raw


def run(*args: str, **kwargs: Any) -> str:
    out = StringIO()
    call_command("redislock", *args, stdout=out, **kwargs)
    return out.getvalue()


class _Tty(StringIO):
    def isatty(self) -> bool:
        return True


def test_list_table_and_json(lock_backend):
    add_junk(lock_backend.client(), 100)
    with Lock("report:daily", ttl=30, purpose="nightly report") as a, Lock("invoice:1", ttl=30):
        text = run("list")
        assert "report:daily" in text and "invoice:1" in text and "nightly report" in text
        assert "2 held locks on 'default'." in text
        assert a.token[:6] in text and a.token not in text
        assert "ghost" not in text
        data = json.loads(run("list", "--json"))
        assert [d["name"] for d in data] == ["invoice:1", "report:daily"]
        entry = data[1]
        assert entry["token_prefix"] == a.token[:6] and a.token not in json.dumps(data)
        assert entry["owner"]["pid"] == os.getpid() and entry["fence"] == a.fence
        assert 0 < entry["ttl"] <= 30 and entry["purpose"] == "nightly report"
        assert entry["connection"] == "default" and entry["watchdog"] is False
        assert entry["acquired_at"].endswith("+00:00")
        assert (entry["kind"], entry["limit"]) == ("lock", None)
        [holder] = entry["holders"]
        assert holder["token_prefix"] == a.token[:6] and holder["fence"] == a.fence
        assert holder["owner"] == entry["owner"] and holder["purpose"] == "nightly report"
        assert [d["name"] for d in json.loads(run("list", "--pattern", "report:*", "--json"))] == [
            "report:daily"
        ]
    assert "No locks are held." in run("list")
    assert "No held lock matches." in run("list", "--pattern", "x*")
    assert json.loads(run("list", "--json")) == []


def test_list_other_connection(settings, make_server):
    server = make_server()
    settings.CACHES = {
        **settings.CACHES,
        "other": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": server.url},
    }
    with server.client() as raw:
        hold_raw(raw, ["elsewhere"])
    data = json.loads(run("list", "--json", "--connection", "other"))
    assert [d["name"] for d in data] == ["elsewhere"] and data[0]["connection"] == "other"
    assert json.loads(run("list", "--json")) == []
    with pytest.raises(CommandError, match="not a cache alias"):
        run("list", "--connection", "missing")


def test_inspect(lock_backend):
    with Lock("job", ttl=30, purpose="the job") as lock:
        text = run("inspect", "job")
        assert "the job" in text and f"{lock.token[:6]}…" in text and lock.token not in text
        assert f"Fence:       {lock.fence}" in text
        assert "Kind:        lock" in text and "Holders:     1" in text
        data = json.loads(run("inspect", "job", "--json"))
        assert data["name"] == "job" and data["token_prefix"] == lock.token[:6]
    with pytest.raises(CommandError, match="not held"):
        run("inspect", "job")
    with pytest.raises(CommandError, match="must not contain"):
        run("inspect", "a{b}")


def test_release(lock_backend):
    received: list[dict[str, Any]] = []

    def receiver(**kwargs: Any) -> None:
        received.append(kwargs)

    lock_force_released.connect(receiver)
    try:
        lock = Lock("job", ttl=30)
        lock.acquire()
        text = run("release", "job", "--yes")
        assert "Released lock 'job'" in text and lock_info("job") is None
        assert received[0]["info"].token == lock.token and received[0]["user"] is None
        with pytest.raises(CommandError, match="not held"):
            run("release", "job", "--yes")
    finally:
        lock_force_released.disconnect(receiver)


def test_release_with_token_prefix(lock_backend):
    lock = Lock("job", ttl=30)
    lock.acquire()
    other = "zz" if not lock.token.startswith("zz") else "yy"
    with pytest.raises(CommandError, match="another holder"):
        run("release", "job", "--yes", "--token", other * 4)
    with pytest.raises(CommandError, match="at least 6"):
        run("release", "job", "--yes", "--token", "abc")
    assert lock_info("job") is not None
    # --token=VALUE: a token may start with "-" (urlsafe base64), which argparse would
    # take for an option in "--token VALUE".
    run("release", "job", "--yes", f"--token={lock.token[:6]}")
    assert lock_info("job") is None
    second = Lock("job", ttl=30)
    second.acquire()
    run("release", "job", "--yes", f"--token={second.token}")
    assert lock_info("job") is None


def test_release_asks_on_a_terminal(monkeypatch):
    lock = Lock("job", ttl=30)
    lock.acquire()
    # Off a terminal, without --yes: refuse rather than guess.
    monkeypatch.setattr(sys, "stdin", StringIO())
    with pytest.raises(CommandError, match="--yes"):
        run("release", "job")
    assert lock_info("job") is not None
    monkeypatch.setattr(sys, "stdin", _Tty())
    answers = iter(["n", "y"])
    prompts: list[str] = []

    def fake_input(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    monkeypatch.setattr("builtins.input", fake_input)
    with pytest.raises(CommandError, match="Cancelled"):
        run("release", "job")
    assert lock_info("job") is not None
    out = run("release", "job")
    assert "Owner:" in out and "Released lock 'job'" in out
    assert "Force-release lock 'job'?" in prompts[0] and len(prompts) == 2


def test_release_refuses_a_holder_that_changed_while_asking(monkeypatch):
    first = Lock("job", ttl=30)
    first.acquire()
    monkeypatch.setattr(sys, "stdin", _Tty())
    second = Lock("job", ttl=30)

    def switch_holders(prompt: str) -> str:
        first.release()
        second.acquire()
        return "yes"

    monkeypatch.setattr("builtins.input", switch_holders)
    with pytest.raises(CommandError, match="changed hands"):
        run("release", "job")
    assert lock_info("job").token == second.token


def test_backend_down_is_a_command_error(real_backend):
    real_backend.server.stop()
    with pytest.raises(CommandError, match="unavailable"):
        run("list")


def test_key_prefix_setting_is_used(lock_backend):
    hold_raw(lock_backend.client(), ["mine"], prefix="custom")
    with override_settings(REDISLOCK={"KEY_PREFIX": "custom"}):
        assert [d["name"] for d in json.loads(run("list", "--json"))] == ["mine"]
    assert json.loads(run("list", "--json")) == []


@pytest.mark.slow
def test_from_the_command_line():
    lock = Lock("cli-job", ttl=30, purpose="cli")
    lock.acquire()
    manage = [sys.executable, "manage.py", "redislock"]
    cwd = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    listed = subprocess.run(
        [*manage, "list", "--json"], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0, listed.stderr
    assert [d["name"] for d in json.loads(listed.stdout)] == ["cli-job"]
    refused = subprocess.run(
        [*manage, "release", "cli-job"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert refused.returncode == 1 and "--yes" in refused.stderr
    done = subprocess.run(
        [*manage, "release", "cli-job", "--yes"], cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0 and "Released" in done.stdout
    assert lock_info("cli-job") is None
    assert command_module.MIN_TOKEN_PREFIX == 6
