"""``Semaphore``: at most ``limit`` holders, a lease per permit, the whole ``Lock`` surface
(DESIGN §9). Every server found and fakeredis (``lock_backend``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from django_redislock import (
    Lock,
    LockConfigurationError,
    LockHolder,
    LockNotAcquired,
    Semaphore,
    force_release,
    held_locks,
    lock_info,
    locked,
)
from django_redislock.inspection import force_release_holder
from tests.support.polling import wait_until

KEYS = "redislock:{exports}*"


def _keys(backend: Any) -> list[bytes]:
    return sorted(backend.client().keys(KEYS))


@pytest.mark.parametrize(
    ("limit", "error"),
    [(0, "limit must be >= 1"), (-2, "limit must be >= 1"), (True, "limit must be an int"),
     ("3", "limit must be an int"), (2.0, "limit must be an int")],
)  # fmt: skip
def test_a_bad_limit_is_refused_before_any_network_call(limit: Any, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Semaphore("exports", limit, connection="no-such-alias")
    with pytest.raises(ValueError, match="ttl must be > 0"):
        Semaphore("exports", 3, ttl=0, connection="no-such-alias")


def test_at_most_limit_holders(lock_backend: Any) -> None:
    permits = [Semaphore("exports", 3, ttl=10, purpose=f"export {i}") for i in range(4)]
    for permit in permits[:3]:
        assert permit.acquire(blocking=False)
    assert [p.fence for p in permits[:3]] == [1, 2, 3]  # grows with every permit granted
    assert not permits[3].acquire(blocking=False)
    assert permits[3].available() == 0 and permits[3].locked()
    holders = permits[0].holders()
    assert all(isinstance(h, LockHolder) for h in holders)
    assert [h.token for h in holders] == [p.token for p in permits[:3]]
    assert [h.purpose for h in holders] == ["export 0", "export 1", "export 2"]
    assert permits[1].owned() and not permits[3].owned()
    assert 9 < permits[2].remaining() <= 10 and permits[3].remaining() is None
    permits[1].release()
    assert permits[0].available() == 1 and not permits[0].locked()
    assert permits[3].acquire(blocking=False) and permits[3].fence == 4
    for permit in (permits[0], permits[2], permits[3]):
        permit.release()
    # Nothing of a semaphore outlives its last permit but the fence counter.
    assert _keys(lock_backend) == [b"redislock:{exports}:fence"]


def test_a_waiter_is_woken_by_a_release_and_leaves_nothing(lock_backend: Any) -> None:
    holder = Semaphore("exports", 1, ttl=30)
    assert holder.acquire(blocking=False)
    waiter = Semaphore("exports", 1, ttl=30)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiter.acquire(timeout=20)))
    thread.start()
    client = lock_backend.client()
    assert wait_until(lambda: client.zcard("redislock:{exports}:queue") == 1)  # in line
    holder.release()
    thread.join(20)
    assert got == [True] and waiter.fence == 2
    assert client.zcard("redislock:{exports}:queue") == 0  # its place went with the grant
    waiter.release()
    assert _keys(lock_backend) == [b"redislock:{exports}:fence"]


def test_a_release_names_the_next_in_line(lock_backend: Any) -> None:
    # A process registers its waiters when they are first refused, not in the line's
    # order: a release that woke a process's longest waiter could wake one that is not
    # next, which was refused again while the next one slept (8 threads: 5 acquisitions
    # in 3 s). The release names the next in line; only that waiter tries again.
    client = lock_backend.client()
    holder = Semaphore("exports", 1, ttl=30)
    assert holder.acquire(blocking=False)
    waiters = [Semaphore("exports", 1, ttl=30) for _ in range(2)]
    threads = []
    for count, waiter in enumerate(waiters, start=1):
        threads.append(threading.Thread(target=waiter.acquire, kwargs={"timeout": 20}))
        threads[-1].start()
        assert wait_until(lambda n=count: client.zcard("redislock:{exports}:queue") == n)
    first, second = client.zrange("redislock:{exports}:queue", 0, -1)
    pubsub = client.pubsub()
    pubsub.subscribe("redislock:{exports}:released")
    assert wait_until(lambda: pubsub.get_message(timeout=0.1) is not None)  # confirmed
    holder.release()
    # The line's order, not the threads': a waiter slowed past its place's life (a loaded
    # machine) comes back behind the other.
    assert wait_until(lambda: any(w.token for w in waiters), timeout=20)
    winner, other = waiters if waiters[0].token else waiters[::-1]
    assert winner.token == first.decode() and winner.fence == 2
    assert _next_message(pubsub) == b"T:" + first
    winner.release()
    assert wait_until(lambda: other.token is not None, timeout=20)
    assert other.token == second.decode()
    assert _next_message(pubsub) == b"T:" + second
    other.release()
    for thread in threads:
        thread.join(20)
    assert _next_message(pubsub) == b"1"  # nobody in line: each process's longest waiter
    pubsub.close()


def _next_message(pubsub: Any) -> Any:
    found: list[Any] = []
    wait_until(lambda: bool(found.append(pubsub.get_message(timeout=0.1)) or found[-1]))
    return found[-1]["data"]


def test_threads_of_one_process_take_turns(lock_backend: Any) -> None:
    done = [0] * 8
    failed: list[int] = []

    def take_turns(index: int) -> None:
        permit = Semaphore("exports", 1, ttl=10)
        for _ in range(10):
            # Taking turns with 7 others at a 2 ms hold is a matter of ms; a waiter
            # missed by a release sleeps ~2 s (the subscribed wait) before it looks again.
            if not permit.acquire(timeout=1.5):
                failed.append(index)
                return
            threading.Event().wait(0.002)
            permit.release()
            done[index] += 1

    threads = [threading.Thread(target=take_turns, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failed == [] and done == [10] * 8


def test_a_timed_out_waiter_leaves_the_line(lock_backend: Any) -> None:
    holder = Semaphore("exports", 1, ttl=30)
    assert holder.acquire(blocking=False)
    assert not Semaphore("exports", 1, ttl=30).acquire(timeout=0.2)
    assert lock_backend.client().zcard("redislock:{exports}:queue") == 0
    with pytest.raises(LockNotAcquired), Semaphore("exports", 1, ttl=30, timeout=0.05):
        pass
    holder.release()


def test_an_expired_permit_frees_only_itself(lock_backend: Any) -> None:
    crashed = Semaphore("exports", 2, ttl=0.2)  # never released: its holder "died"
    alive = Semaphore("exports", 2, ttl=30)
    assert crashed.acquire(blocking=False) and alive.acquire(blocking=False)
    late = Semaphore("exports", 2, ttl=30)
    assert late.acquire(timeout=10)  # after the crashed holder's TTL
    assert alive.owned() and 25 < alive.remaining() <= 30
    assert {h.token for h in alive.holders()} == {alive.token, late.token}
    assert not crashed.owned()
    alive.release()
    late.release()


def test_watchdog_keeps_a_permit(lock_backend: Any) -> None:
    with Semaphore("exports", 2, ttl=0.3, watchdog=True) as permit:
        first = permit.valid_until
        # Renewed past twice its TTL: the permit outlived its first lease.
        assert wait_until(lambda: permit.valid_until > first + 0.6, timeout=5)
        assert permit.owned() and not permit.lost
    assert lock_info("exports") is None


def test_async_twins(lock_backend: Any) -> None:
    async def main() -> None:
        async with Semaphore("exports", 2, ttl=10) as first:
            other = Semaphore("exports", 2, ttl=10)
            assert await other.aacquire(blocking=False)
            assert await first.aavailable() == 0 and await first.alocked()
            assert [h.token for h in await first.aholders()] == [first.token, other.token]
            assert await first.aowned() and 9 < await first.aremaining() <= 10
            await other.arelease()
            assert await first.aavailable() == 1

    asyncio.run(main())
    assert lock_info("exports") is None


def test_inspection_and_force_release_of_one_permit(lock_backend: Any) -> None:
    a, b = Semaphore("exports", 3, ttl=10, purpose="a"), Semaphore("exports", 3, ttl=10)
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    [info] = list(held_locks("exports"))
    assert (info.kind, info.limit, [h.token for h in info.holders]) == (
        "semaphore", 3, [a.token, b.token],
    )  # fmt: skip
    assert info.purpose == "a" and info.fence == a.fence
    assert force_release_holder("exports", token=a.token).released
    assert not a.owned() and b.owned()
    assert [h.token for h in lock_info("exports").holders] == [b.token]
    assert force_release("exports")
    assert lock_info("exports") is None and not b.owned()


def test_a_lock_and_a_semaphore_on_one_name(lock_backend: Any) -> None:
    semaphore_first = pytest.raises(
        LockConfigurationError, match=r"in use by a semaphore; it was asked for as a lock"
    )
    with Semaphore("shared", 2, ttl=10), semaphore_first:
        Lock("shared", ttl=5).acquire(blocking=False)
    lock_first = pytest.raises(
        LockConfigurationError, match=r"in use by a lock; it was asked for as a semaphore"
    )
    with Lock("shared", ttl=10), lock_first:
        Semaphore("shared", 2, ttl=5).acquire(blocking=False)
    with Lock("shared", ttl=10), lock_first:
        Semaphore("shared", 2, ttl=5).available()


def test_the_decorator_takes_kind_semaphore(lock_backend: Any) -> None:
    seen: list[Any] = []

    @locked("exports", kind="semaphore", limit=2, ttl=10)
    def export() -> None:
        info = lock_info("exports")
        seen.append((info.kind, info.limit, len(info.holders)))

    export()
    assert seen == [("semaphore", 2, 1)]
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'limit'"):
        locked("exports", kind="semaphore")(export)()


def test_lost_on_lost_and_max_hold(lock_backend: Any) -> None:
    lost: list[Any] = []
    permit = Semaphore("exports", 2, ttl=0.3, watchdog=True, on_lost=lost.append)
    assert permit.acquire(blocking=False)
    assert force_release("exports", token=permit.token)  # taken away behind its back
    assert wait_until(lambda: permit.lost, timeout=5)
    assert wait_until(lambda: lost == [permit], timeout=5)
    capped = Semaphore("exports", 2, ttl=0.3, watchdog=True, max_hold=0.6)
    assert capped.acquire(blocking=False)
    assert wait_until(lambda: capped.lost, timeout=5)  # the watchdog stopped at max_hold
    # Reported at the holder's estimate, a renewal's trip before the server's expiry.
    assert wait_until(lambda: not capped.owned(), timeout=1)


def test_signals_name_the_semaphore(lock_backend: Any) -> None:
    from django_redislock.signals import lock_acquired, lock_released

    seen: list[tuple[str, Any]] = []

    def on_acquired(sender: Any, lock: Any, **kwargs: Any) -> None:
        seen.append(("acquired", sender))

    def on_released(sender: Any, lock: Any, **kwargs: Any) -> None:
        seen.append(("released", sender))

    lock_acquired.connect(on_acquired, dispatch_uid="semaphore-acquired")
    lock_released.connect(on_released, dispatch_uid="semaphore-released")
    try:
        with Semaphore("exports", 2, ttl=10):
            pass
    finally:
        lock_acquired.disconnect(dispatch_uid="semaphore-acquired")
        lock_released.disconnect(dispatch_uid="semaphore-released")
    assert seen == [("acquired", Semaphore), ("released", Semaphore)]


@pytest.mark.django_db(transaction=True)
def test_release_waits_for_commit(lock_backend: Any) -> None:
    from django.db import transaction

    with transaction.atomic():
        with Semaphore("exports", 2, ttl=10) as permit:
            pass
        assert permit.owned()  # still held: the transaction is open
    assert not permit.owned() and lock_info("exports") is None


def test_unreachable_server_is_backend_unavailable(settings: Any) -> None:
    from django_redislock import LockBackendUnavailable

    settings.CACHES = {
        **settings.CACHES,
        "down": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"},
    }
    with pytest.raises(LockBackendUnavailable):
        Semaphore("exports", 2, connection="down", ttl=5).acquire(blocking=False)


def test_forked_child_cannot_release_or_extend(real_backend: Any) -> None:
    from tests.test_lock import in_a_forked_child

    permit = Semaphore("exports", 2, ttl=30)
    assert permit.acquire(blocking=False)
    assert in_a_forked_child(permit, also=lambda: not permit.owned()) == 0
    assert permit.owned() and permit.remaining() > 25
    permit.release()
