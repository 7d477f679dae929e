"""What acquire() returning True promises when a release handed the lock over.

The lock is the caller's in Redis at that moment, and its validity is counted from
no later than the hand-off: a waiter paused past the handed key's TTL does not get
a stale lock back as valid (it waits on), and one that waited longer than its own
TTL before the hand-off does not get a lock that is already ``lost``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from django_redislock import Lock
from django_redislock import lock as lock_module
from tests.support.held import token_at
from tests.support.polling import wait_until

REPO = Path(__file__).resolve().parents[1]


def claimant(client, lock: Lock) -> str | None:
    """The token of the waiter that holds the claim on the next turn, if any."""
    claim = client.get(lock.keys.claim)
    return None if claim is None else claim.decode().split(":", 1)[0]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_waiter_paused_past_its_hand_off_waits_on(real_backend, mode):
    client = real_backend.client()
    holder = Lock("paused-heir", ttl=5)
    assert holder.acquire(blocking=False)
    waiter = subprocess.Popen(
        [sys.executable, "-m", "tests.support.handoff_worker", real_backend.url,
         "paused-heir", mode, "0.5", "20"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        # It waits with a claim on the next turn: stop it there.
        assert wait_until(lambda: claimant(client, holder) is not None, timeout=30)
        heir = claimant(client, holder)
        os.kill(waiter.pid, signal.SIGSTOP)
        holder.release()  # hands the lock to the stopped waiter: its token, PX 500
        assert token_at(client, holder.key) == heir
        assert wait_until(lambda: client.get(holder.key) is None, timeout=5)
        other = Lock("paused-heir", ttl=5)
        assert other.acquire(blocking=False)
        os.kill(waiter.pid, signal.SIGCONT)
        # It must see the hand-off is stale and claim the next turn again, not return.
        assert wait_until(
            lambda: claimant(client, other) == heir or waiter.poll() is not None, timeout=30
        )
        if waiter.poll() is not None:
            pytest.fail(f"acquire() returned while another held the lock: {waiter.stdout.read()}")
        other.release()  # now it is handed over live
        out, _ = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            os.kill(waiter.pid, signal.SIGCONT)
            waiter.kill()
            waiter.wait()
    result = json.loads(out)
    assert result["ok"] and result["held_in_redis"] and result["token"] == heir
    assert result["lost"] is False and 0 < result["valid_left"] <= 0.5
    assert result["fence"] > other.fence


def _wait_then_hand_off(acquire_in_thread, ttl: float) -> Lock:
    """A holder hands the lock to a waiter whose last attempt is over ``ttl`` old."""
    holder = Lock("late-heir", ttl=5)
    assert holder.acquire(blocking=False)
    client = lock_module.lock_client("default")
    waiter = Lock("late-heir", ttl=ttl)
    result: dict[str, object] = {}
    thread = threading.Thread(target=acquire_in_thread, args=(waiter, result))
    thread.start()
    assert wait_until(lambda: claimant(client, holder) is not None, timeout=10)
    claimed_at = lock_module.clock()
    # The waiter sleeps up to 2 s between attempts: let its TTL pass since the last one.
    assert wait_until(lambda: lock_module.clock() > claimed_at + ttl + 0.1, timeout=5)
    holder.release()
    thread.join(10)
    assert result["ok"] is True
    assert result["lost"] is False
    return waiter


def test_validity_counts_from_the_hand_off_not_the_last_attempt():
    def acquire(lock: Lock, result: dict[str, object]) -> None:
        result["ok"] = lock.acquire(timeout=10)
        result["lost"] = lock.lost

    waiter = _wait_then_hand_off(acquire, ttl=0.3)
    assert waiter.owned()
    waiter.release()


def test_validity_counts_from_the_hand_off_not_the_last_attempt_async():
    def acquire(lock: Lock, result: dict[str, object]) -> None:
        async def run() -> None:
            result["ok"] = await lock.aacquire(timeout=10)
            result["lost"] = lock.lost
            await lock.arelease()

        asyncio.run(run())

    _wait_then_hand_off(acquire, ttl=0.3)
