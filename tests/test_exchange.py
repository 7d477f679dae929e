"""The exchange, the quorum transport's sync side: one operation on several nodes from the
caller's thread, on real servers, a fault proxy and scripted misbehaving nodes."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis

from django_redislock import leases
from django_redislock.transports import exchange, node_pool
from django_redislock.transports.nodes import Deadlines
from tests.support.polling import wait_until
from tests.support.scripted_node import ScriptedNode

KEY = "redislock:{quorum}"


def _sockets_to(port: int) -> int:
    """This process's TCP connections to ``port`` (psutil: no guessing)."""
    import psutil

    return sum(
        1
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED
    )


@pytest.fixture
def nodes(make_server, make_proxy, settings):
    """``nodes("real", "proxied", "silent", ...)``: aliases q0.. and what stands behind
    each (a server, a proxied server, or a :class:`ScriptedNode` mode)."""
    scripted: list[ScriptedNode] = []

    def start(*kinds: str) -> dict[str, Any]:
        caches, behind = dict(settings.CACHES), {}
        for i, kind in enumerate(kinds):
            if kind == "real":
                behind[f"q{i}"] = server = make_server()
                url = server.url
            elif kind == "proxied":
                behind[f"q{i}"] = proxy = make_proxy(make_server())
                url = proxy.url
            else:
                node = ScriptedNode(kind)  # type: ignore[arg-type]
                scripted.append(node)
                behind[f"q{i}"], url = node, node.url
            caches[f"q{i}"] = {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url}
        settings.CACHES = caches
        return behind

    yield start
    for node in scripted:
        node.close()


def _majority(results: dict[str, Any]) -> bool:
    return sum(not isinstance(r, BaseException) for r in results.values()) >= 2


@pytest.fixture(params=["sync", "async"])
def call(request):
    """``call(ex, op, enough=None)``: one round on the exchange, from this thread (sync)
    or from an event loop (async: the same exchange, its sockets watched by the loop)."""

    def sync_call(ex: exchange.Exchange, op: Any, enough: Any = None) -> dict[str, Any]:
        return ex.gather(ex.send(op), enough)

    def async_call(ex: exchange.Exchange, op: Any, enough: Any = None) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            return await ex.agather(await ex.asend(op), enough)

        return asyncio.run(go())

    return sync_call if request.param == "sync" else async_call


def test_every_node_answers(nodes, call):
    nodes("real", "real", "real")
    with exchange.Exchange(["q0", "q1", "q2"], Deadlines(1.0, 1.0)) as ex:
        results = call(ex, leases.GetAndPttl(KEY))
    assert results == {alias: [None, -2] for alias in ("q0", "q1", "q2")}


def test_a_node_that_accepts_and_never_answers(nodes, call):
    """Its connection never becomes ready: the majority decides without it, and the
    setup given up on is closed by the library, not left to the garbage collector."""
    behind = nodes("real", "real", "mute")
    mute = behind["q2"]
    deadlines = Deadlines(command=0.5, connect=0.3)
    started = time.monotonic()
    with exchange.Exchange(["q0", "q1", "q2"], deadlines) as ex:
        results = call(ex, leases.GetAndPttl(KEY), _majority)
    assert set(results) == {"q0", "q1"}, results
    assert time.monotonic() - started < deadlines.connect  # nobody waited for the mute one
    # The majority can answer before the mute node's thread has counted its accept.
    assert wait_until(lambda: mute.accepted == 1, 10)
    # the setup thread gives up within its budget and closes what it opened
    assert wait_until(lambda: _sockets_to(mute.port) == 0, 10)


def test_a_node_that_answers_after_the_deadline(nodes, call):
    behind = nodes("real", "real", "proxied")
    slow = behind["q2"]
    deadlines = Deadlines(command=0.2, connect=1.0)
    with exchange.Exchange(["q0", "q1", "q2"], deadlines) as ex:  # warm every pool
        ex.gather(ex.send(leases.GetAndPttl(KEY)))
    slow.delay(0.3)  # 600 ms a round trip
    with exchange.Exchange(["q0", "q1", "q2"], deadlines) as ex:
        results = call(ex, leases.GetAndPttl(KEY))
    assert isinstance(results["q2"], TimeoutError)
    assert results["q0"] == results["q1"] == [None, -2]
    # given up on at its deadline: that connection was closed at once
    assert _sockets_to(slow.port) == 0


def test_a_straggler_left_behind_is_read_by_the_reaper(nodes):
    """The call returns with the majority; the slow node's reply arrives later and its
    connection goes back to the pool, ready for the next call."""
    behind = nodes("real", "real", "proxied")
    slow = behind["q2"]
    deadlines = Deadlines(command=2.0, connect=2.0)
    with exchange.Exchange(["q0", "q1", "q2"], deadlines) as ex:  # warm every pool
        ex.gather(ex.send(leases.GetAndPttl(KEY)))
    slow.delay(0.1)
    behind_of: dict[str, Any] = {}
    with exchange.Exchange(["q0", "q1", "q2"], deadlines, behind_of) as ex:
        results = ex.gather(ex.send(leases.GetAndPttl(KEY)), _majority)
    assert set(results) == {"q0", "q1"} and "q2" in behind_of
    pool = node_pool.pool_of("q2")
    assert pool is not None
    assert wait_until(lambda: len(pool.idle) == 1, 10)  # read, then pooled
    assert _sockets_to(slow.port) == 1


def test_a_later_command_waits_behind_the_owed_reply(nodes):
    """A lock's next command to a node goes on the connection still owed a reply, so it
    runs after the earlier one (a SET then a DEL: the key ends deleted)."""
    behind = nodes("real", "real", "proxied")
    slow = behind["q2"]
    deadlines = Deadlines(command=2.0, connect=2.0)
    behind_of: dict[str, Any] = {}
    with exchange.Exchange(["q0", "q1", "q2"], deadlines) as ex:  # warm every pool
        ex.gather(ex.send(leases.GetAndPttl(KEY)))
    slow.delay(0.1)
    with exchange.Exchange(["q0", "q1", "q2"], deadlines, behind_of) as ex:
        ex.gather(ex.send(leases.CommandOp("SET", KEY, "x")), _majority)
    with exchange.Exchange(["q0", "q1", "q2"], deadlines, behind_of) as ex:
        results = ex.gather(ex.send(leases.CommandOp("DEL", KEY)))
    assert results == {"q0": 1, "q1": 1, "q2": 1}  # q2's DEL came after its SET
    assert slow.client().exists(KEY) == 0


def test_a_node_reset_mid_reply(nodes, call):
    behind = nodes("real", "real", "half-then-reset")
    node = behind["q2"]
    with exchange.Exchange(["q0", "q1", "q2"], Deadlines(1.0, 1.0)) as ex:
        results = call(ex, leases.GetAndPttl(KEY))
    assert isinstance(results["q2"], (redis.exceptions.ConnectionError, OSError))
    assert results["q0"] == results["q1"] == [None, -2]
    assert _sockets_to(node.port) == 0


def test_threads_share_the_node_pools(nodes):
    nodes("real", "real", "real")
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            for _ in range(50):
                with exchange.Exchange(["q0", "q1", "q2"], Deadlines(2.0, 2.0)) as ex:
                    results = ex.gather(ex.send(leases.CommandOp("INCR", KEY)))
                    assert all(isinstance(r, int) for r in results.values()), results
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert exchange.supports(["q0", "q1", "q2"])


def test_a_later_command_waits_behind_one_whose_connection_is_being_set_up(nodes):
    """The first call returns while a slow node's first connection is still being set
    up; the lock's next call takes that setup over and writes behind the first command."""
    behind = nodes("real", "real", "proxied")
    slow = behind["q2"]
    slow.delay(0.05)  # the handshake's round trips make the setup outlast the first call
    deadlines = Deadlines(command=2.0, connect=5.0)
    behind_of: dict[str, Any] = {}
    with exchange.Exchange(["q0", "q1", "q2"], deadlines, behind_of) as ex:
        first = ex.gather(ex.send(leases.CommandOp("SET", KEY, "x")), _majority)
    assert "q2" not in first and behind_of["q2"].setup is not None
    slow.delay(0)  # a new connection would now be ready long before that one
    with exchange.Exchange(["q0", "q1", "q2"], deadlines, behind_of) as ex:
        results = ex.gather(ex.send(leases.CommandOp("DEL", KEY)))
    assert results == {"q0": 1, "q1": 1, "q2": 1}  # q2's DEL came after its SET
    assert slow.client().exists(KEY) == 0


def test_a_node_silent_mid_reply(nodes, call):
    """Half a reply, then nothing: the node fails (at its deadline from a thread, after
    ``PARTIAL_REPLY_WAIT`` from a loop) and its connection is closed."""
    behind = nodes("real", "real", "half-then-silent")
    node = behind["q2"]
    with exchange.Exchange(["q0", "q1", "q2"], Deadlines(0.5, 1.0)) as ex:
        results = call(ex, leases.GetAndPttl(KEY))
    assert isinstance(results["q2"], (redis.exceptions.TimeoutError, TimeoutError)), results
    assert results["q0"] == results["q1"] == [None, -2]
    assert _sockets_to(node.port) == 0


def test_the_loop_stays_free_while_a_node_is_silent(nodes):
    """From an event loop the sockets are watched by the loop: other tasks run while the
    exchange waits (a blocking read would starve the ticker until the deadline)."""
    nodes("real", "real", "silent")

    async def go() -> tuple[dict[str, Any], int]:
        ticks, stop = 0, asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        task = asyncio.create_task(ticker())
        try:
            with exchange.Exchange(["q0", "q1", "q2"], Deadlines(0.3, 1.0)) as ex:
                results = await ex.agather(await ex.asend(leases.GetAndPttl(KEY)))
        finally:
            stop.set()
            await task
        return results, ticks

    results, ticks = asyncio.run(go())
    assert isinstance(results["q2"], TimeoutError)
    assert results["q0"] == results["q1"] == [None, -2]
    assert ticks >= 10, ticks  # about 60 in 0.3 s; a blocked loop gives 1 or 2


def test_idle_connections_the_server_closed_are_replaced(nodes, call):
    """Idle pooled connections are checked (one ``poll`` for all) before a write: the
    ones whose server closed them are replaced, and every node answers."""
    behind = nodes("real", "real", "real")
    with exchange.Exchange(["q0", "q1", "q2"], Deadlines(1.0, 1.0)) as ex:  # warm every pool
        call(ex, leases.GetAndPttl(KEY))
    for alias in ("q0", "q2"):
        server = behind[alias].client()
        server.client_kill_filter(_type="normal", skipme=True)
        pool = node_pool.pool_of(alias)
        assert pool is not None and pool.idle
        assert wait_until(lambda pool=pool: node_pool.ready([pool.idle[0]._sock.fileno()], 0), 5)
    with exchange.Exchange(["q0", "q1", "q2"], Deadlines(1.0, 1.0)) as ex:
        results = call(ex, leases.GetAndPttl(KEY))
    assert results == {alias: [None, -2] for alias in ("q0", "q1", "q2")}
