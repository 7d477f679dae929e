"""Sending scripts: ``EVALSHA``, and ``EVAL`` when the server answers ``NOSCRIPT``
(restarted, or ``SCRIPT FLUSH``). EVAL runs the script and caches it, so the next
EVALSHA finds it.

The only place in the package that sends a script, once per way of sending: one
call and a batch (a pipeline, optionally followed by ``WAIT``), sync and async. A
call in a batch that got ``NOSCRIPT`` did not run; it is sent again with EVAL,
alone (with its ``WAIT``), so nothing runs twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

import redis
from redis.exceptions import NoScriptError, ResponseError

from .. import leases

_pack_in_c: Any
try:  # hiredis packs a command in C; redis-py's own packer encodes each argument in Python
    from hiredis import pack_command as _pack_in_c
except ImportError:  # pragma: no cover - hiredis is optional
    _pack_in_c = None

#: Connection classes whose wire protocol :func:`run` drives itself (redis-py's own:
#: anything else, fakeredis's included, goes through the client).
_PLAIN_CONNECTIONS = (redis.Connection, redis.SSLConnection, redis.UnixDomainSocketConnection)


class ScriptCall(Protocol):
    """What a script call needs (a kind's ``Operation`` is one)."""

    @property
    def script(self) -> Any: ...
    @property
    def keys(self) -> Sequence[str]: ...
    @property
    def args(self) -> Sequence[Any]: ...


class Call(NamedTuple):
    """A script call that is not a kind's operation (a fenced write)."""

    script: Any
    keys: Sequence[str]
    args: Sequence[Any]


class Wait(NamedTuple):
    """``WAIT replicas ms`` after the scripts of a batch."""

    replicas: int
    ms: int


def _command(call: ScriptCall, by_sha: bool) -> tuple[Any, ...]:
    script, keys = call.script, call.keys
    head = ("EVALSHA", script.sha) if by_sha else ("EVAL", script.source)
    return (*head, len(keys), *keys, *call.args)


def _commands(
    calls: Sequence[ScriptCall], wait: Wait | None, by_sha: bool
) -> list[tuple[Any, ...]]:
    commands = [_command(call, by_sha) for call in calls]
    if wait is not None:
        commands.append(("WAIT", wait.replicas, wait.ms))
    return commands


def _missing(calls: Sequence[ScriptCall], replies: list[Any]) -> list[int]:
    return [i for i in range(len(calls)) if isinstance(replies[i], NoScriptError)]


def _merge(
    replies: list[Any], missing: list[int], again: list[Any], wait: Wait | None
) -> list[Any]:
    for index, reply in zip(missing, again, strict=False):
        replies[index] = reply
    if wait is not None:
        replies[-1] = again[-1]  # the WAIT after the calls that ran last
    return replies


def _raised(reply: Any) -> Any:
    if isinstance(reply, Exception):
        raise reply
    return reply


# -- sync -------------------------------------------------------------------------


def run(client: Any, call: ScriptCall) -> Any:
    """Run one script call on ``client`` (any redis-py client); its raw reply."""
    pool = _plain_pool(client)
    send = client.execute_command if pool is None else _Direct(pool).send
    try:
        return send(*_command(call, by_sha=True))
    except NoScriptError:
        return send(*_command(call, by_sha=False))


def _plain_pool(client: Any) -> Any:
    """``client``'s pool when a call may run on one of its connections directly, else None.

    A lock call is one command and its reply: redis-py's ``execute_command`` around it
    (retries, which the lock clients turn off; observability hooks; encoding each
    argument in Python) cost more than the server's work on this path. The pool's own
    checkout still replaces a connection the server closed while it sat idle, and the
    connection still disconnects itself on any error but an error reply.
    """
    if type(client) is not redis.Redis or getattr(client, "connection", None) is not None:
        return None  # a Cluster, a single-connection client, a subclass (fakeredis)
    pool = client.connection_pool
    if pool.connection_class not in _PLAIN_CONNECTIONS or getattr(pool, "cache", None):
        return None  # another wire (fakeredis), or client-side caching
    return pool


class _Direct:
    """One command on a connection of ``pool``, sent as redis-py's own would be."""

    __slots__ = ("pool",)

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def send(self, *args: Any) -> Any:
        pool = self.pool
        conn = leases.take_kept(pool) or leases.get_connection(pool)
        try:
            conn.send_packed_command(_pack(conn, args))
            reply = conn.read_response()
        except ResponseError:
            leases.keep_or_release(pool, conn)  # an error reply is a complete reply
            raise
        except BaseException:
            pool.release(conn)  # it disconnected itself
            raise
        leases.keep_or_release(pool, conn)
        return reply


def _pack(conn: Any, args: tuple[Any, ...]) -> Any:
    if _in_c(conn):
        return (_pack_in_c(args),)
    return conn.pack_command(*args)


def _pack_all(conn: Any, commands: list[tuple[Any, ...]]) -> Any:
    if _in_c(conn):
        return [_pack_in_c(args) for args in commands]
    return conn.pack_commands(commands)


def _in_c(conn: Any) -> bool:
    """hiredis packs as redis-py would: str arguments in UTF-8."""
    return _pack_in_c is not None and conn.encoder.encoding in ("utf-8", "utf8")


def run_batch(client: Any, calls: Sequence[ScriptCall], wait: Wait | None = None) -> list[Any]:
    """Run ``calls`` in one pipeline (plus ``WAIT``): each raw reply or its error, in order,
    then the ``WAIT`` reply. A failed round trip raises."""
    replies = _pipeline(client, _commands(calls, wait, by_sha=True))
    missing = _missing(calls, replies)
    if not missing:
        return replies
    again = _pipeline(client, _commands([calls[i] for i in missing], wait, by_sha=False))
    return _merge(replies, missing, again, wait)


def _pipeline(client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for command in commands:
        pipe.execute_command(*command)
    return list(pipe.execute(raise_on_error=False))


# -- asyncio ----------------------------------------------------------------------


class Batch(leases.Op):
    """Script calls (plus ``WAIT``) in one round trip: each raw reply or its error.

    On a connection the library holds (:mod:`django_redislock.leases`), or through
    a client without a single pool (the asyncio ``RedisCluster``) as a pipeline.
    """

    __slots__ = ("calls", "wait")

    def __init__(self, calls: Sequence[ScriptCall], wait: Wait | None = None) -> None:
        self.calls, self.wait = calls, wait
        self.scripts = tuple({call.script.sha: call.script for call in calls}.values())

    async def on_connection(self, conn: Any) -> Any:
        return await self._run(self._on_connection, conn)

    async def on_client(self, client: Any) -> Any:
        return await self._run(self._on_client, client)

    async def _run(self, send: Any, target: Any) -> list[Any]:
        calls, wait = self.calls, self.wait
        replies = await send(target, _commands(calls, wait, by_sha=True))
        missing = _missing(calls, replies)
        if not missing:
            return replies
        leases.forget_loaded()  # a server restarted or flushed its scripts: load them again
        again = await send(target, _commands([calls[i] for i in missing], wait, by_sha=False))
        return _merge(replies, missing, again, wait)

    @staticmethod
    async def _on_connection(conn: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
        await _asend(conn, _pack_all(conn, commands))
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:  # a complete (error) reply: read the next one
                replies.append(exc)
        return replies

    @staticmethod
    async def _on_client(client: Any, commands: list[tuple[Any, ...]]) -> list[Any]:
        pipe = client.pipeline(transaction=False)
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))


async def _asend(conn: Any, packed: Any) -> None:
    """Write packed commands on an asyncio connection of redis-py's.

    redis-py bounds the write by the socket timeout with ``asyncio.wait_for``, which
    on Python 3.11 runs it in a task of its own: two loop turns per command. On a
    connected, healthy connection with nothing waiting to be written, the transport
    takes the bytes at once (it hands them to the kernel, or keeps them and writes
    them as the socket allows), so there is nothing to wait for; a write that cannot
    reach the server shows as the reply's read failing, within the socket timeout.
    Anything else (a health check due, a closing or backed-up transport, not
    redis-py's stream) takes redis-py's own path.
    """
    writer = getattr(conn, "_writer", None)
    if (
        isinstance(writer, asyncio.StreamWriter)
        and not conn.health_check_interval
        and not writer.transport.is_closing()
        and not writer.transport.get_write_buffer_size()
    ):
        writer.writelines(packed)
        return
    await conn.send_packed_command(packed)


class Single(Batch):
    """One script call as a :class:`leases.Op`: its raw reply; an error reply raises."""

    __slots__ = ()

    def __init__(self, call: ScriptCall) -> None:
        super().__init__((call,))

    async def _run(self, send: Any, target: Any) -> Any:
        return _raised((await super()._run(send, target))[0])


async def arun(client: Any, call: ScriptCall) -> Any:
    """Async :func:`run`, on a connection the library holds for the call."""
    return await leases.call(client, Single(call))


async def arun_batch(
    client: Any, calls: Sequence[ScriptCall], wait: Wait | None = None
) -> list[Any]:
    """Async :func:`run_batch`, on a connection the library holds for the call."""
    return list(await leases.call(client, Batch(calls, wait)))


__all__ = [
    "Batch",
    "Call",
    "ScriptCall",
    "Single",
    "Wait",
    "arun",
    "arun_batch",
    "run",
    "run_batch",
]
