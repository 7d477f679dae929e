"""The release channel's wake-up messages: one definition shared by Lua and Python."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_redislock import Lock, force_release, scripts, waiting, wakeups
from django_redislock.kinds.mutex import Mutex
from django_redislock.wakeups import Wakeup, decode
from tests.support.polling import wait_until

ALL_SCRIPTS = [v for v in vars(scripts).values() if isinstance(v, scripts.Script)]


def test_decode_each_message():
    assert decode(wakeups.FREE.encode()) == Wakeup(everyone=False)
    assert decode(wakeups.FREED_OUT_OF_TURN.encode()) == Wakeup(everyone=True)
    assert decode(b"G:tok-1:42:1796378403415") == Wakeup(
        everyone=False, heir=b"tok-1", fence=42, handed_at_ms=1796378403415
    )
    # An older release script sent no time: the heir confirms with an attempt of its own.
    assert decode(b"G:tok-1:42") == Wakeup(everyone=False, heir=b"tok-1", fence=42)


@pytest.mark.parametrize("script", ALL_SCRIPTS, ids=lambda s: s.name)
def test_scripts_publish_only_named_messages(script):
    # Every PUBLISH sends a WAKE_* name (or builds on one), never a bare literal,
    # and every name a script uses is defined by the prelude it was loaded with.
    for payload in re.findall(r"'PUBLISH',\s*ARGV\[\d\],\s*([^)]*)\)", script.source):
        assert payload.startswith("WAKE_"), payload
    used = set(re.findall(r"\bWAKE_[A-Z_]+\b", script.source))
    defined = set(re.findall(r"^local (WAKE_[A-Z_]+) = ", script.source, re.M))
    assert used == defined
    assert used <= set(wakeups.LUA_NAMES)


def test_scripts_publish_what_the_listener_decodes(lock_backend):
    # The real server (and fakeredis) send exactly what the Python side decodes.
    lock = Lock("wake-consts", ttl=5)
    pubsub = lock_backend.client().pubsub()
    pubsub.subscribe(lock.keys.channel)
    assert pubsub.get_message(timeout=5)["type"] == "subscribe"

    def next_data() -> bytes:
        message = pubsub.get_message(timeout=5)
        assert message is not None
        return message["data"]

    # Nobody in line: the release publishes nothing (the next message is the force-release's).
    assert lock.acquire(blocking=False)
    lock.release()
    assert lock.acquire(blocking=False)
    assert force_release("wake-consts")
    assert decode(next_data()) == Wakeup(everyone=True)
    # A lock that keeps no line (Redlock's nodes, wait_replicas): its release frees it for
    # the longest waiter of each process.
    other = Lock("wake-consts", ttl=5)
    assert other.acquire(blocking=False)
    assert other.transport.call(Mutex.of(other, claim_ms=None).release(other.token))
    assert decode(next_data()) == Wakeup(everyone=False)
    # A hand-off names the heir, its fence and the server's clock when it was made.
    lock = Lock("wake-consts", ttl=5)
    assert lock.acquire(blocking=False)
    client = lock_backend.client()
    client.set(lock.keys.claim, "heir-token:1:5000:1:someone", px=2500)
    before = _server_ms(client)
    lock.release()
    handed = decode(next_data())
    after = _server_ms(client)
    assert handed.heir == b"heir-token" and handed.fence == lock.fence + 1
    assert handed.handed_at_ms is not None and before <= handed.handed_at_ms <= after
    pubsub.close()


def _server_ms(client) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def test_a_fake_socket_is_never_selected_on():
    # fakeredis numbers its sockets from a counter: the number may be a real descriptor of
    # this process, where select() never sees a release (waiters slept to their fallback).
    import os
    import socket

    import fakeredis

    from django_redislock.subscriber import _fileno

    pubsub = fakeredis.FakeRedis(server=fakeredis.FakeServer()).pubsub()
    pubsub.subscribe("channel")
    fake = pubsub.connection._sock
    assert isinstance(fake.fileno(), int) and _fileno(fake) is None
    real, other = socket.socketpair()
    try:
        assert _fileno(real) == real.fileno() and os.fstat(real.fileno())
    finally:
        real.close()
        other.close()


def test_waiting_threads_are_woken_on_fakeredis_too(settings, lock_backend):
    # Threads queued on one name: each release wakes the next at once (a missed wake-up
    # costs MAX_SUBSCRIBED_WAIT, 2 s: the longest wait shows it).
    import threading
    import time

    from django_redislock.attempts import MAX_SUBSCRIBED_WAIT

    waits: list[float] = []

    def worker():
        for _ in range(10):
            asked = time.monotonic()
            with Lock("wake-turns", ttl=10, timeout=30):
                waits.append(time.monotonic() - asked)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(waits) == 30 and max(waits) < MAX_SUBSCRIBED_WAIT / 2, max(waits)


def test_messages_that_arrive_together_each_reach_their_waiter(real_backend):
    # The subscriber reads the first reply off the socket itself; what came with it
    # (here a second hand-off and a free, in one write) must not wait for more traffic.
    channel = "redislock:{together}:released"
    first = waiting.register("default", channel, token="tok-a")
    second = waiting.register("default", waiting.wake_channel().decode(), token="tok-b")
    third = waiting.register("default", channel, token="tok-c")
    try:
        assert wait_until(lambda: first.subscribed and second.subscribed, timeout=10)
        for waiter in (first, second, third):
            waiter.clear()  # woken by the subscription's confirmation
        pipe = real_backend.client().pipeline(transaction=False)
        pipe.publish(channel, f"{wakeups.HANDED_TO}tok-a:1:5")
        pipe.publish(waiting.wake_channel(), f"{wakeups.HANDED_TO}tok-b:2:5")
        pipe.publish(channel, wakeups.FREED_OUT_OF_TURN)
        assert pipe.execute() == [1, 1, 1]
        assert wait_until(lambda: first.woken and second.woken and third.woken, timeout=5)
        assert first.granted is not None and first.granted.fence == 1
        assert second.granted is not None and second.granted.fence == 2
    finally:
        for waiter in (first, second, third):
            waiter.acquired = True  # nothing to pass on
            waiter.close()


# -- a waiting thread reads the socket itself (one wake-up per hand-off) -------------------


def _subscribed(*waiters: Any) -> None:
    assert wait_until(lambda: all(w.subscribed for w in waiters), timeout=10)
    for waiter in waiters:
        waiter.clear()  # woken by the subscription's confirmation


def _close(*waiters: Any) -> None:
    for waiter in waiters:
        waiter.acquired = True  # nothing to pass on
        waiter.close()


class _Leading:
    """A registered waiter whose wait runs in a thread that leads (reads the socket)."""

    def __init__(self, alias: str, channel: str, token: str, seconds: float) -> None:
        self.listener = waiting._listener(alias)
        self.waiter = waiting.register(alias, channel, token=token)
        self.result: list[bool] = []
        _subscribed(self.waiter)
        self.thread = threading.Thread(
            target=lambda: self.result.append(self.waiter.wakeup.wait(seconds))
        )
        self.thread.start()
        assert wait_until(lambda: self.listener.leader is self.waiter.wakeup, timeout=5)

    def ended(self, within: float = 5) -> list[bool]:
        self.thread.join(within)
        assert not self.thread.is_alive()
        return self.result


@contextlib.contextmanager
def _leading(
    channel: str, token: str, seconds: float, alias: str = "default"
) -> Iterator[_Leading]:
    leading = _Leading(alias, channel, token, seconds)
    try:
        yield leading
    finally:
        _close(leading.waiter)


def _hand_off(client: Any, token: str, fence: int) -> None:
    client.publish(waiting.wake_channel(), f"{wakeups.HANDED_TO}{token}:{fence}:5")


def test_a_waiting_thread_reads_its_hand_off_itself(real_backend):
    with _leading("redislock:{lead}:released", "tok-lead", 10) as heir:
        _hand_off(real_backend.client(), "tok-lead", 7)
        assert heir.ended() == [True] and heir.waiter.granted.fence == 7
        assert heir.listener.leader is None


def test_the_leading_thread_wakes_the_other_waiters(real_backend):
    channel = "redislock:{lead-others}:released"
    with _leading(channel, "tok-1", 10) as leader:
        follower = waiting.register("default", channel, token="tok-2")
        try:
            _subscribed(follower)
            followed: list[bool] = []
            follow = threading.Thread(target=lambda: followed.append(follower.wakeup.wait(10)))
            follow.start()

            async def a_task_waits() -> bool:
                loop = asyncio.get_running_loop()
                task_waiter = waiting.register("default", channel, loop=loop, token="tok-3")
                try:
                    task_waiter.clear()
                    real_backend.client().publish(channel, f"{wakeups.TURN_OF}tok-2,tok-3")
                    return await task_waiter.wakeup.wait(10)
                finally:
                    _close(task_waiter)

            assert asyncio.run(a_task_waits()) is True  # read by the leading thread
            follow.join(5)
            assert followed == [True]
            assert leader.thread.is_alive() and not leader.waiter.woken  # not its turn
            _hand_off(real_backend.client(), "tok-1", 3)
            assert leader.ended() == [True]
        finally:
            _close(follower)


def test_a_leading_thread_woken_from_elsewhere_stops_reading(real_backend):
    with _leading("redislock:{lead-poked}:released", "tok-p", 30) as leading:
        leading.waiter.wake()  # as a passed-on wake or a subscriber going down does
        assert leading.ended() == [True] and leading.listener.leader is None


def test_a_lost_subscriber_connection_wakes_the_leading_thread(real_backend):
    with _leading("redislock:{lead-lost}:released", "tok-l", 30) as leading:
        real_backend.client().client_kill_filter(_type="pubsub")
        # Woken to fall back on backoff, not left reading a dead socket.
        assert leading.ended(within=10) == [True]
        # The subscriber comes back, and a waiting thread reads for it again.
        assert wait_until(lambda: leading.waiter.subscribed, timeout=10)


def test_after_a_thread_led_a_task_is_still_woken(real_backend):
    channel = "redislock:{lead-then-task}:released"
    with _leading(channel, "tok-t", 0.05) as leading:
        assert leading.ended() == [False]  # led, timed out: the subscriber parks
        assert leading.listener.leader is None

    async def a_task_waits() -> bool:
        loop = asyncio.get_running_loop()
        task_waiter = waiting.register("default", channel, loop=loop, token="tok-u")
        try:
            await task_waiter.wakeup.wait(5)  # the confirmation (the channel lingers)
            task_waiter.clear()
            real_backend.client().publish(channel, wakeups.FREE)
            return await task_waiter.wakeup.wait(5)
        finally:
            _close(task_waiter)

    assert asyncio.run(a_task_waits()) is True


def test_a_message_cut_off_midway_does_not_keep_a_waiting_thread(settings, make_server):
    # A partition in the middle of a message: the thread reading it gives up at its
    # waiter's deadline (acquire() keeps its timeout), and the subscriber reads the rest.
    from django_redislock.testing import FaultProxy

    server = make_server()
    with FaultProxy(server) as proxy:
        settings.CACHES = {
            **settings.CACHES,
            "cut": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": proxy.url},
        }
        channel = "redislock:{cut}:released"
        try:
            with _leading(channel, "tok-cut", 0.5, alias="cut") as leading:
                proxy.cut_next_reply(5)
                server.client().publish(channel, wakeups.FREE)
                assert leading.ended(within=10) == [False]
                leading.waiter.clear()
                proxy.heal()  # the rest arrives: the subscriber reads it, wakes the waiter
                assert wait_until(lambda: leading.waiter.woken, timeout=10)
        finally:
            proxy.heal()


# -- a reply left in the client's buffer while a thread starts leading ---------------------


class _ReadThenStall:
    """The subscriber's read of one reply, then a stall until a waiting thread leads:
    what a subscriber thread descheduled between its read and its next check looks like.
    The read took every reply that came in the same segment into the client's buffer."""

    def __init__(self, listener: Any) -> None:
        self.listener = listener
        self.original = listener._read_one
        self.read = threading.Event()
        self.go_on = threading.Event()
        self.armed = False  # armed by the test once its waiters are subscribed

    def __call__(self, pubsub: Any) -> None:
        self.original(pubsub)
        if self.armed and threading.current_thread().name.startswith("redislock-subscriber"):
            self.armed = False
            self.read.set()
            self.go_on.wait(10)


def _publish_together(client: Any, *messages: tuple[str, str]) -> None:
    pipe = client.pipeline(transaction=False)
    for channel, data in messages:
        pipe.publish(channel, data)
    assert pipe.execute() == [1] * len(messages)


@pytest.fixture
def stalled_read(monkeypatch):
    listener = waiting._listener("default")
    stall = _ReadThenStall(listener)
    monkeypatch.setattr(listener, "_read_one", stall)
    yield stall
    stall.go_on.set()


def test_a_buffered_wake_reaches_a_thread_that_began_leading_meanwhile(real_backend, stalled_read):
    listener = stalled_read.listener
    first = waiting.register("default", "redislock:{buf-first}:released", token="tok-f")
    heir = waiting.register("default", "redislock:{buf-heir}:released", token="tok-h")
    try:
        _subscribed(first, heir)
        stalled_read.armed = True
        _publish_together(
            real_backend.client(),
            ("redislock:{buf-first}:released", wakeups.FREE),
            ("redislock:{buf-heir}:released", wakeups.FREE),
        )
        assert stalled_read.read.wait(10)  # the first read; the second reply is buffered
        result: list[bool] = []
        waits = threading.Thread(target=lambda: result.append(heir.wakeup.wait(3)))
        waits.start()
        assert wait_until(lambda: listener.leader is heir.wakeup, timeout=5)
        stalled_read.go_on.set()
        waits.join(10)
        # On the old code the buffered release waited for the deadline: [False].
        assert result == [True] and first.woken
    finally:
        _close(first, heir)


def test_a_buffered_wake_reaches_a_task_while_a_thread_leads(real_backend, stalled_read):
    listener = stalled_read.listener
    first = waiting.register("default", "redislock:{buf-a-first}:released", token="tok-af")
    leader = waiting.register("default", "redislock:{buf-a-lead}:released", token="tok-al")
    leads: list[bool] = []
    thread = threading.Thread(target=lambda: leads.append(leader.wakeup.wait(5)))

    async def a_task_waits() -> bool:
        loop = asyncio.get_running_loop()
        task = waiting.register(
            "default", "redislock:{buf-a-task}:released", loop=loop, token="tok-at"
        )
        try:
            assert await task.wakeup.wait(5)  # the subscription's confirmation
            task.clear()
            stalled_read.armed = True
            _publish_together(
                real_backend.client(),
                ("redislock:{buf-a-first}:released", wakeups.FREE),
                ("redislock:{buf-a-task}:released", wakeups.FREE),
            )
            assert stalled_read.read.wait(10)
            thread.start()  # a thread begins to lead while the task's wake is buffered
            assert wait_until(lambda: listener.leader is leader.wakeup, timeout=5)
            stalled_read.go_on.set()
            # On the old code it came when the leading thread's wait ran out (5 s).
            return await task.wakeup.wait(2)
        finally:
            _close(task)

    try:
        _subscribed(first, leader)
        assert asyncio.run(a_task_waits()) is True
    finally:
        leader.wake()
        thread.join(10)
        _close(first, leader)
