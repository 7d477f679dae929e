"""A Lock's line of waiters (``scripts/line.lua``): a refused waiter takes a place
behind the claimant, and a release hands the lock to the claimant and makes the first
in line the claimant of the turn after, so every release of a lock others wait for is
a hand-off, and a waiter is refused once per acquisition.
"""

from __future__ import annotations

import threading
from typing import Any

from django_redislock import Lock, waiting
from django_redislock.holder import parse_holder
from tests.support.held import held_at, token_at
from tests.support.polling import wait_until


def _attempts_of(lock: Lock, sent: list[tuple[str, int]]) -> None:
    real = lock._do_acquire

    def counted(token: str, waited_ms: int) -> Any:
        reply = real(token, waited_ms)
        sent.append((token, waited_ms))  # once Redis has it: the order is the line's
        return reply

    lock._do_acquire = counted  # type: ignore[method-assign]


def _warm_holder(name: str) -> Lock:
    """A held lock, with this process subscribed to its channel."""
    holder = Lock(name, ttl=30)
    assert holder.acquire()
    _warm_the_channel(holder)
    return holder


def _warm_the_channel(holder: Lock) -> None:
    """Have this process subscribed to ``holder``'s channel: a waiter that got it, and
    gave it back to ``holder`` by a hand-off (a free release's message, read late, would
    wake the next waiter of the test)."""
    from django_redislock.connection import lock_client

    client = lock_client("default")
    waiter = Lock(holder.name, timeout=20)
    thread = threading.Thread(target=waiter.acquire)
    thread.start()
    assert wait_until(lambda: client.get(holder.keys.claim) is not None)
    holder.release()
    thread.join(20)
    thread = threading.Thread(target=holder.acquire, kwargs={"timeout": 20})
    thread.start()
    assert wait_until(lambda: client.get(holder.keys.claim) is not None)
    waiter.release()
    thread.join(20)
    assert holder.owned()
    # Confirmed (a claim can come before the confirmation, on a loaded machine): now a
    # waiter registers before its first attempt, which takes its place in line.
    channel = holder.keys.channel.encode()
    assert wait_until(lambda: waiting._listener("default").is_confirmed(channel), timeout=30)


def _places(lock: Lock) -> list[str]:
    """The tokens in ``lock``'s line, first first (the claimant not included)."""
    from django_redislock.connection import lock_client

    line = lock_client("default").get(lock.keys.line)
    records = [] if line is None else line.decode().split("\x1e")
    return [record.split(":")[1] for record in records]


def _claimant(client: Any, lock: Lock) -> str | None:
    claim = client.get(lock.keys.claim)
    return None if claim is None else claim.decode().split(":", 1)[0]


def test_waiters_take_turns_in_line_with_one_attempt_each(real_backend: Any) -> None:
    client = real_backend.client()
    holder = _warm_holder("line")
    waiters = [Lock("line", ttl=30, timeout=20) for _ in range(3)]
    sent: list[list[tuple[str, int]]] = [[] for _ in waiters]
    order: list[int] = []
    threads = []

    def wait_turn(index: int) -> None:
        assert waiters[index].acquire()
        order.append(index)
        waiters[index].release()

    for index, waiter in enumerate(waiters):
        _attempts_of(waiter, sent[index])
        threads.append(threading.Thread(target=wait_turn, args=(index,)))
        threads[-1].start()
        assert wait_until(lambda i=index: len(sent[i]) >= 1), sent
    # The first claims the next turn, the others queue behind it in arrival order.
    tokens = [attempts[0][0] for attempts in sent]
    assert _claimant(client, holder) == tokens[0]
    assert _places(holder) == tokens[1:]
    holder.release()
    for thread in threads:
        thread.join(20)
    assert order == [0, 1, 2]
    # Each was handed the lock: refused once, never asked again.
    assert [[waited for _, waited in attempts] for attempts in sent] == [[1], [1], [1]], sent
    assert client.get(holder.keys.line) is None and client.get(holder.keys.claim) is None


def test_a_place_past_its_deadline_is_passed_over(real_backend: Any) -> None:
    client = real_backend.client()
    holder = _warm_holder("line-stale")
    first = Lock("line-stale", ttl=30, timeout=20)
    got = []
    thread = threading.Thread(target=lambda: got.append(first.acquire()))
    thread.start()
    assert wait_until(lambda: _claimant(client, holder) is not None)
    # A waiter that died in line: its place's deadline passed without a renewal.
    seconds, micros = client.time()
    gone = seconds * 1000 + micros // 1000 - 1
    client.set(holder.keys.line, f"{gone}:ghost:5:30000:1:someone", px=5000)
    holder.release()  # to the claimant; the ghost does not become the next claimant
    thread.join(20)
    assert got == [True]
    assert client.get(holder.keys.claim) is None and client.get(holder.keys.line) is None
    first.release()
    assert client.get(holder.keys.key) is None  # nobody was handed it: free


def test_the_next_claim_lives_only_what_its_place_had_left(real_backend: Any) -> None:
    # Two waiters of a killed process: the release hands the lock to the first (it is
    # lost for its TTL) and makes the second the claimant of the turn after. Its claim
    # must end when its place would have, not hold live waiters off for a fresh term.
    client = real_backend.client()
    holder = Lock("line-dead", ttl=30)
    assert holder.acquire()
    seconds, micros = client.time()
    soon = seconds * 1000 + micros // 1000 + 800
    client.set(holder.keys.claim, "dead1:5:1000:1:someone", px=2500)
    client.set(holder.keys.line, f"{soon}:dead2:4:1000:1:someone", px=2500)
    holder.release()
    assert token_at(client, holder.keys.key) == "dead1"
    assert _claimant(client, holder) == "dead2"
    assert 0 < client.pttl(holder.keys.claim) <= 800
    client.delete(holder.keys.key, holder.keys.meta, holder.keys.claim)


def test_a_waiter_that_gives_up_leaves_the_line(real_backend: Any) -> None:
    client = real_backend.client()
    holder = _warm_holder("line-leave")
    claimant = Lock("line-leave", ttl=30, timeout=20)
    impatient = Lock("line-leave", ttl=30, timeout=0.5)
    threads = [threading.Thread(target=claimant.acquire)]
    threads[0].start()
    assert wait_until(lambda: _claimant(client, holder) is not None)
    got = []
    sent: list[tuple[str, int]] = []
    _attempts_of(impatient, sent)
    threads.append(threading.Thread(target=lambda: got.append(impatient.acquire())))
    threads[1].start()
    assert wait_until(lambda: len(_places(holder)) == 1)
    threads[1].join(20)
    # Its place (or the claim its last attempt may have taken from a claimant that had
    # not renewed since: that one then waits first in line) went with it.
    gone = sent[0][0]
    assert got == [False] and gone not in _places(holder) and _claimant(client, holder) != gone
    holder.release()
    threads[0].join(20)
    assert claimant.owned()
    claimant.release()


def test_a_caller_that_will_not_wait_takes_no_place(real_backend: Any) -> None:
    client = real_backend.client()
    holder = _warm_holder("line-no-wait")
    assert not Lock("line-no-wait").acquire(blocking=False)
    assert not Lock("line-no-wait").acquire(timeout=0)
    assert client.get(holder.keys.claim) is None and client.get(holder.keys.line) is None
    holder.release()


def test_a_holder_description_carries_no_line_separator(real_backend: Any) -> None:
    with Lock("line-purpose", purpose="nightly\x1ereport") as lock:
        assert parse_holder(_holder(real_backend, lock))["purpose"] == "nightly report"


def _holder(backend: Any, lock: Lock) -> str:
    return held_at(backend.client(), lock.keys.key)[2]


def test_a_hand_off_is_published_on_the_heirs_wake_channel(real_backend: Any) -> None:
    # Only the heir's process listens there: the other waiting processes sleep on.
    client = real_backend.client()
    pubsub = client.pubsub()
    pubsub.psubscribe("redislock:*")
    assert pubsub.get_message(timeout=5)["type"] == "psubscribe"
    holder = Lock("line-wake", ttl=30)
    assert holder.acquire()
    waiter = Lock("line-wake", ttl=30, timeout=20)
    thread = threading.Thread(target=waiter.acquire)
    thread.start()
    assert wait_until(lambda: _claimant(client, holder) is not None)
    assert f"/{waiting.wake_id()}:" in client.get(holder.keys.claim).decode()
    holder.release()
    thread.join(20)
    assert waiter.owned()
    handed = []
    while (message := pubsub.get_message(timeout=1)) is not None:
        if message["type"] == "pmessage" and message["data"].startswith(b"G:"):
            handed.append(message["channel"])
    assert handed == [waiting.wake_channel()]
    waiter.release()
    pubsub.close()


def _wake_id_in_child(queue: Any) -> None:
    queue.put(waiting.wake_id())


def test_a_forked_child_has_a_wake_id_of_its_own() -> None:
    import multiprocessing

    context = multiprocessing.get_context("fork")
    queue: Any = context.Queue()
    child = context.Process(target=_wake_id_in_child, args=(queue,))
    child.start()
    assert queue.get(timeout=30) != waiting.wake_id()
    child.join(30)


def test_a_later_waiter_that_writes_last_does_not_take_the_claim(real_backend: Any) -> None:
    # A claim says how long its waiter had waited when it wrote it; it has waited since,
    # too. A waiter that began later but asks now with a larger figure than the claim's
    # (stale) one must not displace it: it takes a place behind it.
    import time

    client = real_backend.client()
    holder = Lock("claim-age", ttl=30)
    assert holder.acquire()
    first, later = Lock("claim-age", ttl=30), Lock("claim-age", ttl=30)
    first_token, later_token = "first-token", "later-token"
    assert not first._do_acquire(first_token, 5)  # has waited 5 ms: claims the next turn
    assert _claimant(client, holder) == first_token
    time.sleep(0.3)  # the subject: first has now waited about 305 ms
    assert not later._do_acquire(later_token, 100)  # began 100 ms ago
    assert _claimant(client, holder) == first_token
    assert _places(holder) == [later_token]
    holder.release()  # handed to the claimant
    assert token_at(client, holder.keys.key) == first_token
