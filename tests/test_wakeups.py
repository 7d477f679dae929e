"""The release channel's wake-up messages: one definition shared by Lua and Python."""

from __future__ import annotations

import re
import threading

import pytest

from django_redislock import Lock, force_release, scripts, wakeups
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

    from django_redislock.waiting import _fileno

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
    from django_redislock import waiting

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


def _subscribed(*waiters):
    assert wait_until(lambda: all(w.subscribed for w in waiters), timeout=10)
    for waiter in waiters:
        waiter.clear()  # woken by the subscription's confirmation


def _close(*waiters):
    for waiter in waiters:
        waiter.acquired = True  # nothing to pass on
        waiter.close()


def _wait_in_thread(waiter, seconds):
    result = []
    thread = threading.Thread(target=lambda: result.append(waiter.wakeup.wait(seconds)))
    thread.start()
    return thread, result


def test_a_waiting_thread_reads_its_hand_off_itself(real_backend):
    from django_redislock import waiting

    listener = waiting._listener("default")
    heir = waiting.register("default", "redislock:{lead}:released", token="tok-lead")
    try:
        _subscribed(heir)
        thread, result = _wait_in_thread(heir, 10)
        assert wait_until(lambda: listener.leader is heir.wakeup, timeout=5)
        real_backend.client().publish(waiting.wake_channel(), f"{wakeups.HANDED_TO}tok-lead:7:5")
        thread.join(5)
        assert result == [True] and heir.granted is not None and heir.granted.fence == 7
        assert listener.leader is None
    finally:
        _close(heir)


def test_the_leading_thread_wakes_the_other_waiters(real_backend):
    import asyncio

    from django_redislock import waiting

    listener = waiting._listener("default")
    channel = "redislock:{lead-others}:released"
    leader = waiting.register("default", channel, token="tok-1")
    follower = waiting.register("default", channel, token="tok-2")
    try:
        _subscribed(leader, follower)
        lead_thread, led = _wait_in_thread(leader, 10)
        assert wait_until(lambda: listener.leader is leader.wakeup, timeout=5)
        follow_thread, followed = _wait_in_thread(follower, 10)

        async def a_task_waits():
            task_waiter = waiting.register(
                "default", channel, loop=asyncio.get_running_loop(), token="tok-3"
            )
            try:
                task_waiter.clear()
                client = real_backend.client()
                client.publish(channel, f"{wakeups.TURN_OF}tok-2,tok-3")
                return await task_waiter.wakeup.wait(10)
            finally:
                _close(task_waiter)

        assert asyncio.run(a_task_waits()) is True  # read by the leading thread
        follow_thread.join(5)
        assert followed == [True]
        assert lead_thread.is_alive() and not leader.woken  # not its turn: it reads on
        real_backend.client().publish(waiting.wake_channel(), f"{wakeups.HANDED_TO}tok-1:3:5")
        lead_thread.join(5)
        assert led == [True]
    finally:
        _close(leader, follower)


def test_a_leading_thread_woken_from_elsewhere_stops_reading(real_backend):
    from django_redislock import waiting

    listener = waiting._listener("default")
    waiter = waiting.register("default", "redislock:{lead-poked}:released", token="tok-p")
    try:
        _subscribed(waiter)
        thread, result = _wait_in_thread(waiter, 30)
        assert wait_until(lambda: listener.leader is waiter.wakeup, timeout=5)
        waiter.wake()  # as a passed-on wake or a subscriber going down does
        thread.join(5)
        assert result == [True] and listener.leader is None
    finally:
        _close(waiter)


def test_a_lost_subscriber_connection_wakes_the_leading_thread(real_backend):
    from django_redislock import waiting

    listener = waiting._listener("default")
    waiter = waiting.register("default", "redislock:{lead-lost}:released", token="tok-l")
    try:
        _subscribed(waiter)
        thread, result = _wait_in_thread(waiter, 30)
        assert wait_until(lambda: listener.leader is waiter.wakeup, timeout=5)
        real_backend.client().client_kill_filter(_type="pubsub")
        thread.join(10)
        assert result == [True]  # woken to fall back on backoff, not left reading a dead socket
        # The subscriber comes back, and a waiting thread reads for it again.
        assert wait_until(lambda: waiter.subscribed, timeout=10)
    finally:
        _close(waiter)


def test_after_a_thread_led_a_task_is_still_woken(real_backend):
    import asyncio

    from django_redislock import waiting

    listener = waiting._listener("default")
    channel = "redislock:{lead-then-task}:released"
    waiter = waiting.register("default", channel, token="tok-t")
    try:
        _subscribed(waiter)
        assert waiter.wakeup.wait(0.05) is False  # led, timed out: the subscriber parks
        assert listener.leader is None
    finally:
        _close(waiter)

    async def a_task_waits():
        task_waiter = waiting.register(
            "default", channel, loop=asyncio.get_running_loop(), token="tok-u"
        )
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
    from django_redislock import waiting
    from django_redislock.testing import FaultProxy

    server = make_server()
    with FaultProxy(server) as proxy:
        settings.CACHES = {
            **settings.CACHES,
            "cut": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": proxy.url},
        }
        listener = waiting._listener("cut")
        channel = "redislock:{cut}:released"
        waiter = waiting.register("cut", channel, token="tok-cut")
        try:
            _subscribed(waiter)
            thread, result = _wait_in_thread(waiter, 0.5)
            assert wait_until(lambda: listener.leader is waiter.wakeup, timeout=5)
            proxy.cut_next_reply(5)
            server.client().publish(channel, wakeups.FREE)
            thread.join(10)
            assert not thread.is_alive() and result == [False]
            waiter.clear()
            proxy.heal()  # the rest arrives: the subscriber reads it and wakes the waiter
            assert wait_until(lambda: waiter.woken, timeout=10)
        finally:
            proxy.heal()
            _close(waiter)
