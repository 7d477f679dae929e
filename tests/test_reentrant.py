"""Reentrancy (DESIGN §9): ``Lock(reentrant=True)`` and the decorators' ``reentrant=``. The
owner is the process and thread (sync) or the process and asyncio task (async); a re-entry
costs no round trip and counts; the key goes when the count returns to zero."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.core.checks import run_checks

from django_redislock import (
    Lock,
    LockNotAcquired,
    LockNotOwned,
    ReadWriteLock,
    Semaphore,
    lock_info,
    locked,
)
from django_redislock.reentry import count
from tests.test_lock import in_a_forked_child


def _evalsha_calls(backend: Any) -> int:
    stats = backend.client().info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))


def test_sync_nesting_shares_the_first_entry_and_costs_no_round_trip(real_backend: Any) -> None:
    outer = Lock("invoice:7", ttl=10, reentrant=True)
    with outer:
        before = _evalsha_calls(real_backend)
        inner = Lock("invoice:7", ttl=10, reentrant=True)
        with inner:
            assert (inner.token, inner.fence) == (outer.token, outer.fence)
            assert count(inner) == 2 and inner.owned()
            with outer:  # the same object again counts too
                assert count(outer) == 3
        assert _evalsha_calls(real_backend) == before  # three entries and exits, no script
        assert count(outer) == 1 and inner.token is None
        assert lock_info("invoice:7").token == outer.token  # still held: the count is 1
    assert lock_info("invoice:7") is None and count(outer) == 0


def test_the_count_not_the_order_decides(lock_backend: Any) -> None:
    first, second = (Lock("invoice:7", ttl=10, reentrant=True) for _ in range(2))
    assert first.acquire(blocking=False) and second.acquire(blocking=False)
    first.release()  # the first entry leaves first: the second still holds the name
    assert lock_info("invoice:7").token == second.token
    with pytest.raises(LockNotOwned, match="released it already"):
        first.release()
    second.release()
    assert lock_info("invoice:7") is None
    assert first.acquire(blocking=False)  # the carrier is free to take it again
    first.release()


def test_without_reentrant_a_second_acquire_waits(lock_backend: Any) -> None:
    with Lock("invoice:7", ttl=10):
        assert not Lock("invoice:7", ttl=10).acquire(timeout=0.1)
        # Only the owner's own re-entries count: a non-reentrant lock of it waits too.
        assert not Lock("invoice:7", ttl=10, reentrant=True).acquire(blocking=False)


def test_the_classic_example_a_locked_view_calls_a_locked_function(lock_backend: Any) -> None:
    calls: list[str] = []

    @locked("invoice:{invoice_id}", reentrant=True, timeout=0.2)
    def charge(invoice_id: int) -> None:
        calls.append("charge")

    @locked("invoice:{invoice_id}", reentrant=True, timeout=0.2)
    def pay(invoice_id: int) -> None:
        charge(invoice_id)  # the same name, in the same thread: it enters at once
        calls.append("pay")

    pay(7)
    assert calls == ["charge", "pay"] and lock_info("invoice:7") is None

    @locked("invoice:{invoice_id}", timeout=0.2)
    def charge_not_reentrant(invoice_id: int) -> None:
        calls.append("never")

    @locked("invoice:{invoice_id}", timeout=0.2)
    def pay_not_reentrant(invoice_id: int) -> None:
        charge_not_reentrant(invoice_id)

    with pytest.raises(LockNotAcquired):
        pay_not_reentrant(7)  # waits on itself until its timeout
    assert "never" not in calls


def test_two_threads_do_not_share(lock_backend: Any) -> None:
    with Lock("invoice:7", ttl=10, reentrant=True):
        got: list[bool] = []
        other = Lock("invoice:7", ttl=10, reentrant=True)
        thread = threading.Thread(target=lambda: got.append(other.acquire(blocking=False)))
        thread.start()
        thread.join(10)
        assert got == [False]


def test_async_nesting_in_one_task_and_two_tasks_do_not_share(lock_backend: Any) -> None:
    async def main() -> None:
        async with Lock("invoice:7", ttl=10, reentrant=True) as outer:
            async with Lock("invoice:7", ttl=10, reentrant=True) as inner:
                assert inner.token == outer.token and count(inner) == 2

            async def other_task() -> bool:
                return await Lock("invoice:7", ttl=10, reentrant=True).aacquire(blocking=False)

            assert await asyncio.create_task(other_task()) is False
            # Sync code on the loop's thread is that thread's, not the task's.
            assert not Lock("invoice:7", ttl=10, reentrant=True).acquire(blocking=False)
            assert (await lock_info_async("invoice:7")).token == outer.token
        assert lock_info("invoice:7") is None

    asyncio.run(main())


async def lock_info_async(name: str) -> Any:
    from django_redislock import alock_info

    return await alock_info(name)


def test_a_forked_child_never_inherits(real_backend: Any) -> None:
    outer = Lock("invoice:7", ttl=30, reentrant=True)
    assert outer.acquire(blocking=False)

    def child_is_refused() -> bool:
        again = Lock("invoice:7", ttl=30, reentrant=True)
        return not again.acquire(blocking=False) and not outer.acquire(blocking=False)

    assert in_a_forked_child(outer, also=child_is_refused) == 0
    assert outer.owned() and count(outer) == 1
    outer.release()


def test_a_lost_first_entry_is_not_re_entered(lock_backend: Any) -> None:
    outer = Lock("invoice:7", ttl=0.2, reentrant=True)  # no watchdog: it runs out
    assert outer.acquire(blocking=False)
    inner = Lock("invoice:7", ttl=10, reentrant=True)
    assert inner.acquire(blocking=False) and inner.token == outer.token
    assert not inner.lost
    assert wait_for(lambda: outer.lost) and inner.lost  # a re-entry is lost with it
    late = Lock("invoice:7", ttl=10, reentrant=True)
    assert late.acquire(timeout=5) and late.token != outer.token  # from Redis, anew
    late.release()
    inner.release()  # the count is 1: nothing sent
    with pytest.raises(LockNotOwned):
        outer.release()  # the count reached zero: the expired first entry was not ours
    assert lock_info("invoice:7") is None


def wait_for(condition: Any) -> bool:
    from tests.support.polling import wait_until

    return wait_until(condition, timeout=5)


def test_the_setting_is_the_default_and_bad_values_are_refused(
    lock_backend: Any, settings: Any
) -> None:
    settings.REDISLOCK = {**getattr(settings, "REDISLOCK", {}), "REENTRANT": True}
    assert Lock("invoice:7").reentrant and not Lock("invoice:7", reentrant=False).reentrant
    with Lock("invoice:7", ttl=10), Lock("invoice:7", ttl=10) as inner:
        assert count(inner) == 2
    # Kinds where a re-entry would share what is one holder's stay as they are.
    with Semaphore("exports", 1, ttl=10):
        assert not Semaphore("exports", 1, ttl=10).acquire(blocking=False)
    rw = ReadWriteLock("prices", ttl=10)
    with rw.read_lock() as reader, rw.read_lock() as again:
        assert count(again) == 2 and len(reader.holders()) == 1
        # A reader never re-enters as a writer (it would write beside itself reading).
        assert not rw.write_lock().acquire(blocking=False)
    with pytest.raises(ValueError, match="reentrant must be True or False"):
        Lock("invoice:7", reentrant="yes")  # type: ignore[arg-type]
    settings.REDISLOCK = {**settings.REDISLOCK, "REENTRANT": "yes"}
    assert [m.id for m in run_checks() if m.id.startswith("redislock.E")] == ["redislock.E008"]


def test_docs_example_a_locked_view_calls_a_locked_function(lock_backend: Any) -> None:
    from django.test import RequestFactory

    from tests.support.docs_examples import run_example

    ns = run_example("docs/decorators.md", "reentrant-view")
    assert ns["pay"](RequestFactory().post("/"), invoice_id=7).content == b"charged 7"
    assert lock_info("invoice:7") is None
    with Lock("invoice:7", ttl=10):  # held by someone else: the view answers 423
        assert ns["pay"](RequestFactory().post("/"), invoice_id=7).status_code == 423


def test_lock_command_takes_reentrant(lock_backend: Any) -> None:
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import BaseCommand

    from django_redislock import lock_command

    @locked("rebuild", reentrant=True, timeout=0)
    def rebuild_step() -> str:
        return "rebuilt"

    class Command(BaseCommand):
        @lock_command("rebuild", reentrant=True)
        def handle(self, *args: Any, **options: Any) -> None:
            self.stdout.write(rebuild_step())

    out = StringIO()
    call_command(Command(), stdout=out)
    assert out.getvalue() == "rebuilt\n" and lock_info("rebuild") is None
