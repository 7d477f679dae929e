"""Async lock commands on a connection the library holds for the call.

redis-py decides what becomes of a pooled connection when a command ends, and
what it does when the awaiting task is cancelled differs between versions. A
lock call that is given up on (a Redlock node past its deadline, a caller
cancelled while waiting) must leave neither a half-read connection in the pool
nor an open socket for the garbage collector. So an async lock command here
checks a connection out of the client's pool itself, runs on it, and decides
what happens to it:

* a complete reply (an error reply too): back to the pool;
* anything else (a socket error, a deadline, a cancel): disconnected at once,
  on the loop that owns it, then back to the pool (which reconnects it on its
  next use).

A pooled connection the server closed while it sat idle (``CLIENT KILL``, a
restart, an idle timeout) is reconnected before a lock command is sent on it
(:func:`_reconnect_if_closed`): the pool's own check is not enough in every
redis-py we support (8.1 skips it when maintenance notifications are "auto").

A finished call keeps its connection, still checked out, for the next call (async:
of the same loop; sync: :func:`take_kept`, :func:`keep_or_release`), one per pool, while
the pool has others to give, so nobody waits on the pool for it: redis-py's blocking
pool's checkout and return cost more than the rest of an uncontended lock call. Closing
the client closes it; a forked child forgets the parent's.

:func:`call` is for callers without a deadline; :func:`call_within` gives the
command a deadline and getting the connection a budget of its own (connect,
handshake and the script load of a first call are paid there, not inside the
command's deadline). Clients without a single pool (the asyncio
``RedisCluster``) run the command through the client as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import select
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import redis
from redis.exceptions import ResponseError

#: One command (or MULTI block) on a connection.
ConnectionOp = Callable[[Any], Awaitable[Any]]

# The script SHAs loaded through each pool's server (first calls pay SCRIPT LOAD
# while getting the connection, not inside a deadline).
_loaded: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
# Pools whose client was dropped (settings changed): a connection coming back
# from a late call is disconnected instead of parked in a pool nobody uses.
_retired: weakref.WeakSet[Any] = weakref.WeakSet()
# Per pool (sync or asyncio), the idle connection the last lock call kept for the next.
_kept: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
# Strong references to connection hand-backs that outlive their caller.
_pending: set[Any] = set()


class Op:
    """A lock command: how it runs on one connection, and on a client without a pool."""

    __slots__ = ("scripts",)

    #: Scripts to load on the server before the command (while getting the connection).
    scripts: tuple[Any, ...]

    async def on_connection(self, conn: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    async def on_client(self, client: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class CommandOp(Op):
    """One plain command; its raw reply (``EXISTS``, ``GET``, ``PTTL``...)."""

    __slots__ = ("args",)

    def __init__(self, *args: Any) -> None:
        self.args = args
        self.scripts = ()

    async def on_connection(self, conn: Any) -> Any:
        return await _command(conn, *self.args)

    async def on_client(self, client: Any) -> Any:
        return await client.execute_command(*self.args)


class GetAndPttl(Op):
    """``GET key`` and ``PTTL key`` in one ``MULTI`` block: [value, pttl]."""

    __slots__ = ("key",)

    def __init__(self, key: str) -> None:
        self.key = key
        self.scripts = ()

    async def on_connection(self, conn: Any) -> Any:
        commands = [("MULTI",), ("GET", self.key), ("PTTL", self.key), ("EXEC",)]
        await conn.send_packed_command(conn.pack_commands(commands))
        replies = [await conn.read_response() for _ in commands]
        return replies[-1]

    async def on_client(self, client: Any) -> Any:
        pipe = client.pipeline(transaction=True)
        pipe.get(self.key)
        pipe.pttl(self.key)
        return await pipe.execute()


async def _command(conn: Any, *args: Any) -> Any:
    await conn.send_command(*args)
    return await conn.read_response()


def forget_loaded() -> None:
    """A server restarted or flushed its scripts: load them again on the next checkout."""
    _loaded.clear()


def has_pool(client: Any) -> bool:
    """True when commands can run on a connection of the client's own pool."""
    return getattr(client, "connection_pool", None) is not None


def retire(client: Any) -> None:
    """The client is dropped: connections that late calls hand back get disconnected."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        _retired.add(pool)


async def call(client: Any, op: Op) -> Any:
    """Run ``op`` on a connection of ``client``'s pool; no deadline (see module doc)."""
    if not has_pool(client):
        return await op.on_client(client)
    pool = client.connection_pool
    conn = await _kept_connection(pool, op)
    if conn is None:
        conn = await _checkout_now(pool, op)
    clean = False
    try:
        result = await op.on_connection(conn)
        clean = True
        return result
    except ResponseError:
        clean = True  # an error reply is a complete reply
        raise
    finally:
        if not (clean and _keep(pool, conn)):
            await _hand_back(pool, conn, clean)


async def _checkout_now(pool: Any, op: Op) -> Any:
    if _connected_one_is_next(pool):
        return await _checkout(pool, op)  # no connect to cut short: no task of its own
    checkout = asyncio.ensure_future(_checkout(pool, op))
    try:
        return await asyncio.shield(checkout)
    except BaseException:  # cancelled while connecting: hand it back when that ends
        _give_back_later(pool, checkout)
        raise


def _keep(pool: Any, conn: Any) -> bool:
    """Keep ``conn`` for the next lock call of this loop instead of handing it back (see
    the module doc); a call that finds it closed by the server hands it back."""
    if pool in _kept or pool in _retired or not getattr(conn, "is_connected", False):
        return False
    has_room = getattr(pool, "can_get_connection", None)  # redis-py's asyncio pools (5.x-8.x)
    if has_room is None or not has_room():
        return False  # someone may be waiting for this connection
    _kept[pool] = conn
    return True


async def _kept_connection(pool: Any, op: Op) -> Any:
    """The connection the last call kept (:func:`_keep`), if it is ready for ``op``."""
    conn = _kept.pop(pool, None)
    if conn is None:
        return None
    if pool in _retired or not conn.is_connected or _closed_while_idle(conn):
        await _hand_back(pool, conn, clean=False)
        return None
    loaded = _loaded.get(pool, ())
    if any(script.sha not in loaded for script in op.scripts):
        await _hand_back(pool, conn, clean=True)  # the checkout loads them
        return None
    return conn


async def release_kept(pool: Any) -> None:
    """Hand the connection kept for the next call back to ``pool`` (before closing it)."""
    conn = _kept.pop(pool, None)
    if conn is not None:
        await pool.release(conn)


async def call_within(client: Any, op: Op, deadline: float, connect_budget: float) -> Any:
    """Run ``op`` within ``deadline`` seconds, after getting a ready connection.

    Getting the connection (a pooled one at once; a new one pays connect,
    handshake and script loading) has ``connect_budget`` seconds. Past either
    bound this raises :class:`TimeoutError` at once; nothing is cancelled inside
    redis-py: a connection still being set up is disconnected and handed back
    when that ends, one still running the command is disconnected now.
    """
    if not has_pool(client):
        return await _client_within(client, op, deadline)
    pool = client.connection_pool
    checkout = asyncio.ensure_future(_checkout(pool, op))
    try:
        done, _ = await asyncio.wait({checkout}, timeout=connect_budget)
    except BaseException:
        _give_back_later(pool, checkout)
        raise
    if not done:
        _give_back_later(pool, checkout)
        raise TimeoutError(f"no connection within {connect_budget * 1000:g} ms")
    conn = checkout.result()
    command = asyncio.ensure_future(op.on_connection(conn))
    try:
        done, _ = await asyncio.wait({command}, timeout=deadline)
    except BaseException:  # the caller is cancelled (loop shutting down)
        await _abandon(pool, conn, command)
        raise
    if not done:
        await _abandon(pool, conn, command)
        raise TimeoutError(f"no answer within {deadline * 1000:g} ms")
    error = None if command.cancelled() else command.exception()
    clean = error is None or isinstance(error, ResponseError)
    await _hand_back(pool, conn, clean)
    return command.result()


async def _abandon(pool: Any, conn: Any, command: asyncio.Future[Any]) -> None:
    """Close the connection now; hand it back once its command has ended."""
    await conn.disconnect(nowait=True)
    # The closed socket ends the read at once; the cancel covers a command that was
    # not reading yet. Only then may the connection serve someone else.
    command.cancel()
    keep(command)
    if not command.done():
        await asyncio.wait({command})
    _retrieve(command)
    await _hand_back(pool, conn, clean=False)


async def _client_within(client: Any, op: Op, deadline: float) -> Any:
    # No single pool to take a connection from: the client's own handling applies.
    command = asyncio.ensure_future(op.on_client(client))
    done, _ = await asyncio.wait({command}, timeout=deadline)
    if not done:
        command.cancel()
        keep(command)
        raise TimeoutError(f"no answer within {deadline * 1000:g} ms")
    return command.result()


def _connected_one_is_next(pool: Any) -> bool:
    """A connected idle connection is the next ``pool`` hands out, with nobody before us.

    Then a checkout makes no connection, and a cancel cannot cut a connect short (redis-py
    would keep a socket whose handshake never finished): :func:`call` needs no task of
    its own for it, which costs loop turns on every call. Read from redis-py's asyncio
    pools (5.x-8.x); anything else takes the task.
    """
    idle = getattr(pool, "_available_connections", None)
    if not isinstance(idle, list) or not idle or not getattr(idle[-1], "is_connected", False):
        return False
    for guard in (getattr(pool, "_lock", None), getattr(pool, "_condition", None)):
        locked = getattr(guard, "locked", None)
        if guard is not None and (locked is None or locked()):
            return False  # someone is checking out or waiting: the next one may be theirs
    return True


async def _checkout(pool: Any, op: Op) -> Any:
    conn = await get_connection(pool)
    try:
        await _reconnect_if_closed(conn)
        loaded = _loaded.setdefault(pool, set())
        for script in op.scripts:
            if script.sha not in loaded:
                loaded.add(script.sha)
                # An error reply (scripting refused...) is left for EVAL to report.
                with contextlib.suppress(ResponseError):
                    await _command(conn, "SCRIPT", "LOAD", script.source)
    except BaseException:
        await _hand_back(pool, conn, clean=False)
        raise
    return conn


async def _reconnect_if_closed(conn: Any) -> None:
    """Replace the socket of a pooled connection that the server closed while idle.

    An idle connection has nothing to read: end-of-stream or bytes waiting, in the
    event loop's reader or still in the kernel (the loop may not have polled since the
    server closed it), mean the server is gone from it or it is dirty.
    """
    if _closed_while_idle(conn):
        await conn.disconnect()
        await conn.connect()


def _closed_while_idle(conn: Any) -> bool:
    reader = getattr(conn, "_reader", None)  # redis-py's asyncio.StreamReader (5.x-8.x)
    if not isinstance(reader, asyncio.StreamReader):
        return False  # not connected (connect() gives a fresh socket), or no socket (fakeredis)
    if reader.at_eof() or reader.exception() is not None:
        return True
    writer = getattr(conn, "_writer", None)
    sock = None if writer is None else writer.get_extra_info("socket")
    return sock is not None and _readable_or_gone(sock)


def _readable_or_gone(sock: Any) -> bool:
    try:
        return readable_now(sock)
    except (OSError, ValueError):  # closed under us
        return True


def readable_now(sock: Any) -> bool:
    """Bytes or end-of-stream wait on ``sock``: one ``poll`` (``select`` refuses
    descriptors past 1023, as a busy process has), ``select`` where there is no poll."""
    poll = getattr(select, "poll", None)  # not on Windows, nor under eventlet's patching
    if poll is None:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)
    poller = poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


def take_kept(pool: Any) -> Any:
    """Sync: the connection kept for ``pool`` if it is ready (connected, nothing to read)."""
    conn = _kept.pop(pool, None)  # one thread gets it: dict.pop under the GIL
    if conn is None:
        return None
    if _nothing_to_read(conn):
        return conn
    conn.disconnect()  # the server closed it while it sat kept (or it is dirty)
    pool.release(conn)
    return None


def keep_or_release(pool: Any, conn: Any) -> None:
    """Sync: keep ``conn`` for the next call while ``pool`` has others to give, else
    give it back."""
    idle = getattr(pool, "pool", None)  # a BlockingConnectionPool's queue of connections
    if (
        type(pool) is redis.BlockingConnectionPool
        and idle is not None
        and not idle.empty()  # others to give: nobody waits on the pool for this one
        and conn._sock is not None
        and _kept.setdefault(pool, conn) is conn
    ):
        return
    pool.release(conn)


def _nothing_to_read(conn: Any) -> bool:
    # A sync connection, open, with nothing to read (one poll; redis-py's can_read is a
    # socket timeout change, a read and another change).
    sock = conn._sock
    return sock is not None and not _readable_or_gone(sock)


def _forget_kept() -> None:
    _kept.clear()  # a forked child must not use its parent's sockets


os.register_at_fork(after_in_child=_forget_kept)


def get_connection(pool: Any) -> Any:
    """A connection of ``pool`` (sync), or the awaitable of one (asyncio)."""
    if _needs_command_name(type(pool)):
        return pool.get_connection("EVALSHA")
    return pool.get_connection()


_command_name_needed: dict[Any, bool] = {}


def _needs_command_name(pool_class: Any) -> bool:
    """redis-py 5 requires ``get_connection(command_name)``; newer ones warn on it."""
    needed = _command_name_needed.get(pool_class)
    if needed is None:
        parameters = inspect.signature(pool_class.get_connection).parameters
        name = parameters.get("command_name")
        needed = name is not None and name.default is inspect.Parameter.empty
        _command_name_needed[pool_class] = needed
    return needed


async def _hand_back(pool: Any, conn: Any, clean: bool) -> None:
    if not clean or pool in _retired:
        await conn.disconnect(nowait=True)
    await pool.release(conn)


def _give_back_later(pool: Any, checkout: asyncio.Future[Any]) -> None:
    """A connection nobody waits for any more: disconnect it once it is ready."""

    def callback(checkout: asyncio.Future[Any]) -> None:
        if checkout.cancelled() or checkout.exception() is not None:
            return  # it failed: redis-py disconnected and released it
        keep(asyncio.ensure_future(_hand_back(pool, checkout.result(), clean=False)))

    keep(checkout)
    checkout.add_done_callback(callback)


def keep(future: Any) -> None:
    """Hold a strong reference to ``future`` until it is done (its failure is no news)."""
    _pending.add(future)
    future.add_done_callback(_forget)


def _forget(future: asyncio.Future[Any]) -> None:
    _pending.discard(future)
    _retrieve(future)


def _retrieve(future: asyncio.Future[Any]) -> None:
    if future.done() and not future.cancelled():
        future.exception()  # a given-up call's failure is no news
