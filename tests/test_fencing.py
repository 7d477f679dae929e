"""Fencing: a holder paused past its TTL cannot overwrite the next holder's write."""

from __future__ import annotations

import multiprocessing
import os
import signal

import pytest

from django_redislock import Lock
from django_redislock.fencing import fence_of, fenced_set
from tests.support.fencing_workers import (
    create_database,
    new_holder_writer,
    paused_writer,
    read_row,
)

RUNS = 3


def run_pause_scenario(url: str, db_path: str, guarded: bool) -> tuple[str, tuple[int, int]]:
    ctx = multiprocessing.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    holder = ctx.Process(target=paused_writer, args=(url, db_path, guarded, inbox, outbox))
    holder.start()
    try:
        assert outbox.get(timeout=30)[0] == "ready"
        os.kill(holder.pid, signal.SIGSTOP)  # paused past its 0.3 s TTL
        # Its own queue: the stopped process may hold the shared one's write lock.
        second_box = ctx.Queue()
        second = ctx.Process(target=new_holder_writer, args=(url, db_path, second_box))
        second.start()
        assert second_box.get(timeout=30)[0] == "written"  # got it once the TTL ran out
        second.join(30)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    inbox.put("go")
    outcome, _ = outbox.get(timeout=30)
    holder.join(30)
    return outcome, read_row(db_path)


@pytest.mark.parametrize("run", range(RUNS))
def test_paused_holder_write_is_rejected(real_backend, tmp_path, run):
    db_path = str(tmp_path / "fencing.sqlite3")
    create_database(db_path)
    outcome, (balance, fence) = run_pause_scenario(real_backend.url, db_path, guarded=True)
    assert outcome == "stale"
    assert (balance, fence) == (100, 2)  # the new holder's write survived


def test_without_the_guard_the_update_is_lost(real_backend, tmp_path):
    """The same scenario without the fence check loses the new holder's update."""
    db_path = str(tmp_path / "fencing.sqlite3")
    create_database(db_path)
    outcome, (balance, _) = run_pause_scenario(real_backend.url, db_path, guarded=False)
    assert outcome == "written"
    assert balance == 10  # B's +100 was overwritten by the stale holder


def test_fenced_set_in_redis(lock_backend):
    with Lock("res") as first:
        pass
    with Lock("res") as second:
        assert fenced_set("resource:{res}", "new", second)
    assert not fenced_set("resource:{res}", "stale", first)
    assert lock_backend.client().get("resource:{res}") == b"new"


class Unfenced:
    fence = None


@pytest.mark.parametrize("bad", [0, -1, None, "3", True, Unfenced()])
def test_fence_of_rejects_bad_values(bad):
    with pytest.raises(ValueError, match="fence"):
        fence_of(bad)
