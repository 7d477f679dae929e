"""One operation on several nodes from the caller's own thread or loop, with no thread
hop on the common path (the quorum transport's exchange).

The command is written to every node's connection at once; replies are read as they
arrive and the caller stops as soon as its ``enough`` rule decides. A thread waits for
them with ``poll`` on the sockets (``gather``); an event loop watches the same sockets
(``agather``): the code between the waits is the same. What issue 24 made true for the
node calls holds here too:

* each node has its own deadline (``Deadlines.command``) from the moment the command was
  written; past it the node's result is a :class:`TimeoutError` and the library
  disconnects that connection at once. A reply already waiting when the deadline is
  checked is read first, so a busy client host does not turn a healthy node into a
  timed-out one;
* getting a ready connection has its own budget (``Deadlines.connect``), outside the
  command's deadline: an idle connection of this module's own per-node pool is ready at
  once; a new one (connect, handshake, script loading) is set up in a small thread
  pool, so a node that accepts connections and never answers costs the caller nothing
  once a majority has decided;
* a later command to a node (the compare-and-delete after a failed acquire) is written
  on the same connection, behind the earlier one, so it can never overtake it.

Only nodes reached over a plain redis-py pool (TCP, TLS or a Unix socket) can be driven
this way (:func:`supports`); the others keep the node calls as tasks
(:mod:`~django_redislock.transports.nodes`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from redis.exceptions import NoScriptError, ResponseError

from .. import leases
from . import node_pool, wire
from .node_pool import NodePool, Owed

#: An ``enough`` rule: given the results so far (alias -> reply or exception), stop?
Enough = Callable[[dict[str, Any]], bool]


class Request(NamedTuple):
    """The commands of one operation, the scripts they need loaded, and which reply is
    the operation's result."""

    commands: tuple[tuple[Any, ...], ...]
    scripts: tuple[Any, ...]
    fallback: tuple[tuple[Any, ...], ...] | None  # sent after NOSCRIPT (EVAL)

    @property
    def replies(self) -> int:
        return len(self.commands)


def request_of(op: leases.Op) -> Request:
    """The commands of a transport operation (one script call, a GET+PTTL, one command)."""
    if isinstance(op, wire.Single):
        (call,) = op.calls
        return Request((wire._command(call, True),), op.scripts, (wire._command(call, False),))
    if isinstance(op, leases.GetAndPttl):
        commands = (("MULTI",), ("GET", op.key), ("PTTL", op.key), ("EXEC",))
        return Request(commands, (), None)
    if isinstance(op, leases.CommandOp):
        return Request((op.args,), (), None)
    raise TypeError(f"no sync quorum form for {type(op).__name__}")


def supports(aliases: Iterable[str]) -> bool:
    """True when every node can be driven from the caller's thread."""
    return all(node_pool.pool_of(alias) is not None for alias in aliases)


# -- one exchange: operations on several nodes, replies as they arrive ----------------
#: How long an event loop's reader may block on a reply that stopped halfway (a reply
#: this small comes in one segment: only a misbehaving node stops halfway).
PARTIAL_REPLY_WAIT = 0.005

#: A reply to read and drop: owed on a connection taken back from the reaper.
_DROP = -1


class _Link:
    """One node's part of an exchange: its connection (or its setup), what was written on
    it and the replies read so far."""

    __slots__ = ("alias", "conn", "expected", "pool", "queued", "setup", "setup_until")

    def __init__(self, alias: str, pool: NodePool) -> None:
        self.alias, self.pool = alias, pool
        self.conn: Any = None
        self.setup: concurrent.futures.Future[Any] | None = None
        self.setup_until = 0.0
        # Written on the connection, oldest first: [round, replies due, deadline, replies].
        self.expected: list[tuple[int, Request | int, float, list[Any]]] = []
        # Waiting for the connection to be set up: (round, request).
        self.queued: list[tuple[int, Request]] = []

    @property
    def idle(self) -> bool:
        """No connection, no setup, nothing owed: the next send needs a connection."""
        return self.conn is None and self.setup is None and not self.expected


class Exchange:
    """Operations sent to several nodes from this thread, and the replies gathered.

    ``send`` writes one operation (a *round*) to the nodes and returns its number;
    ``gather`` reads until ``enough`` says so for that round, or every node answered or
    failed. ``close`` ends it: a connection with replies still owed goes to the reaper
    (:mod:`~django_redislock.transports.node_pool`) and is remembered in ``behind`` (by
    alias), so the same lock's next exchange on that node writes behind it.
    """

    def __init__(
        self, aliases: Sequence[str], deadlines: Any, behind: dict[str, Owed] | None = None
    ) -> None:
        self.deadlines = deadlines
        self.behind = {} if behind is None else behind
        self.links: dict[str, _Link] = {}
        for alias in aliases:
            pool = node_pool.pool_of(alias)
            if pool is None:
                raise TypeError(f"node {alias!r} cannot be driven from a thread")
            self.links[alias] = _Link(alias, pool)
        self.results: list[dict[str, Any]] = []
        self.packed: dict[tuple[int, Any], tuple[Any, Any]] = {}
        #: The longest a reader blocks on a reply that stopped halfway (None: its deadline).
        self.partial_wait: float | None = None

    # -- sending ------------------------------------------------------------------------
    def send(self, op: leases.Op, aliases: Iterable[str] | None = None) -> int:
        """Write ``op`` to each node (all by default), behind what it was sent before."""
        request = request_of(op)
        round_no = len(self.results)
        self.results.append({})
        now = time.monotonic()
        targets = [self.links[alias] for alias in (self.links if aliases is None else aliases)]
        self._connect([link for link in targets if link.idle], request, now)
        for link in targets:
            alias = link.alias
            if link.setup is not None:
                link.queued.append((round_no, request))
            elif link.conn is None:  # given up on earlier in this exchange
                self.results[round_no][alias] = TimeoutError("the node was given up on")
            else:
                self._write(link, round_no, request, now)
        return round_no

    def _connect(self, links: list[_Link], request: Request, now: float) -> None:
        """A connection (or its setup) for each of ``links``; the idle ones taken from
        the pools checked together, with one ``poll``: a readable idle connection was
        closed by its server (or is dirty), and is replaced."""
        taken = [link for link in links if self._connect_one(link, request, now)]
        if not taken:
            return
        fds = {link: _fileno(link.conn) for link in taken}
        stale = set(node_pool.ready([fd for fd in fds.values() if fd >= 0], 0))
        for link, fd in fds.items():
            if fd < 0 or fd in stale:
                link.conn.disconnect()
                link.conn = link.pool.take()
                if link.conn is None:
                    self._set_up(link, request, now)

    def _connect_one(self, link: _Link, request: Request, now: float) -> bool:
        """True when ``link`` got an idle connection from its pool, not checked yet."""
        owed = self.behind.pop(link.alias, None)
        taken = None if owed is None else node_pool.reclaim(owed)
        if owed is not None and taken == "conn":
            # This lock's earlier command is still owed a reply: write behind it.
            link.conn = owed.conn
            link.expected = [(_DROP, count, deadline, []) for count, deadline in owed.pending]
            return False
        if owed is not None and owed.setup is not None and taken == "setup":
            # Its connection is still being set up: the earlier commands go first on it.
            link.setup, link.setup_until = owed.setup, now + self.deadlines.connect
            dropped = Request(tuple(owed.commands), (), None)
            link.queued = [(_DROP, dropped)] if owed.commands else []
            return False
        link.conn = link.pool.take(check=False)
        if link.conn is None:
            self._set_up(link, request, now)
        return link.conn is not None

    def _set_up(self, link: _Link, request: Request, now: float) -> None:
        link.setup = node_pool.set_up(link.pool, self.deadlines.connect, request.scripts)
        link.setup_until = now + self.deadlines.connect

    @staticmethod
    def _commands(link: _Link, request: Request) -> tuple[tuple[Any, ...], ...]:
        missing = [s for s in request.scripts if s.sha not in link.pool.loaded]
        if missing and request.fallback is not None:
            link.pool.loaded.update(script.sha for script in missing)
            return request.fallback  # EVAL runs the script and caches it
        return request.commands

    def _write(self, link: _Link, round_no: int, request: Request, now: float) -> None:
        commands = self._commands(link, request)
        try:
            link.conn.send_packed_command(self._pack(link.conn, commands), check_health=False)
        except Exception as exc:
            self._fail(link, exc)
            if round_no != _DROP:
                self.results[round_no][link.alias] = exc
            return
        link.expected.append((round_no, request, now + self.deadlines.command, []))

    def _pack(self, conn: Any, commands: tuple[tuple[Any, ...], ...]) -> Any:
        """The bytes of ``commands``, packed once for every node of the round (packing
        five times cost more than the five writes: cProfile, 5-node cycles)."""
        encoder = getattr(conn, "encoder", None)
        key = (id(commands), getattr(encoder, "encoding", None))
        packed = self.packed.get(key)
        if packed is None or packed[0] is not commands:
            data = [_resp(commands, encoder.encode)] if encoder else conn.pack_commands(commands)
            packed = self.packed[key] = (commands, data)
        return packed[1]

    # -- gathering ----------------------------------------------------------------------
    def gather(self, round_no: int, enough: Enough | None = None) -> dict[str, Any]:
        """Read replies until ``enough(results)`` for ``round_no`` (or all are in)."""
        results = self.results[round_no]
        while not (enough is not None and enough(results)) and self._owed(round_no):
            self._step()
        return results

    def _owed(self, round_no: int) -> bool:
        return any(
            any(r == round_no for r, _ in link.queued)
            or any(entry[0] == round_no for entry in link.expected)
            for link in self.links.values()
        )

    def _step(self) -> None:
        reading, timeout = self._watch()
        self._took(reading, node_pool.ready(list(reading), timeout))

    def _watch(self) -> tuple[dict[int, _Link], float]:
        """The sockets to watch (by fd) and how long until a deadline needs a look."""
        now = time.monotonic()
        self._start_ready_setups(now)
        reading = {
            link.conn._sock.fileno(): link
            for link in self.links.values()
            if link.expected and link.conn is not None
        }
        waits = [link.expected[0][2] for link in reading.values()]
        setting_up = [link.setup_until for link in self.links.values() if link.setup]
        timeout = max(0.0, min(waits + setting_up) - now) if waits or setting_up else 0.0
        if setting_up:
            timeout = min(timeout, 0.001)  # a setup thread ends without waking us: look again
        return reading, timeout

    def _took(self, reading: dict[int, _Link], ready: Iterable[int]) -> None:
        for fd in ready:
            self._read(reading[fd])
        self._expire(time.monotonic())

    # -- the same from an event loop ----------------------------------------------------
    async def asend(self, op: leases.Op, aliases: Iterable[str] | None = None) -> int:
        """:meth:`send` (writing does not wait: the commands fit the socket's buffer)."""
        return self.send(op, aliases)

    async def agather(self, round_no: int, enough: Enough | None = None) -> dict[str, Any]:
        """:meth:`gather` with the running loop watching the sockets: the loop is free
        while no reply has come, and a reply that stops halfway holds it at most
        ``PARTIAL_REPLY_WAIT`` (the node then counts as failed)."""
        self.partial_wait = PARTIAL_REPLY_WAIT
        results = self.results[round_no]
        watch = _LoopWatch()
        try:
            while not (enough is not None and enough(results)) and self._owed(round_no):
                reading, timeout = self._watch()
                socks = {fd: link.conn._sock for fd, link in reading.items()}
                self._took(reading, await watch.wait(socks, timeout))
        finally:
            watch.close()
        return results

    def _start_ready_setups(self, now: float) -> None:
        for link in self.links.values():
            setup = link.setup
            if setup is None or not setup.done():
                continue
            link.setup = None
            error = setup.exception()
            if error is not None:
                for round_no, _ in link.queued:
                    if round_no != _DROP:
                        self.results[round_no][link.alias] = error
                link.queued.clear()
                continue
            link.conn = setup.result()
            queued, link.queued = link.queued, []
            for round_no, request in queued:
                self._write(link, round_no, request, now)

    def _read(self, link: _Link) -> None:
        """Read the replies waiting on this connection (a partial one within its deadline)."""
        while link.expected:
            round_no, request, deadline, replies = link.expected[0]
            try:
                wait = max(deadline - time.monotonic(), 0.0001)
                link.conn._sock.settimeout(min(wait, self.partial_wait or wait))
                try:
                    replies.append(link.conn.read_response())
                except ResponseError as exc:  # a complete (error) reply
                    replies.append(exc)
            except Exception as exc:
                self._fail(link, exc)
                return
            if len(replies) == _due(request):
                link.expected.pop(0)
                if round_no != _DROP and not isinstance(request, int):
                    self._settle(link, round_no, request, replies)
            if not self._more_waiting(link):
                return

    def _more_waiting(self, link: _Link) -> bool:
        if not link.expected or link.conn is None:
            return False
        try:
            return bool(link.conn.can_read(timeout=0))
        except Exception as exc:  # closed under us: the owed replies fail
            self._fail(link, exc)
            return False

    def _settle(self, link: _Link, round_no: int, request: Request, replies: list[Any]) -> None:
        reply = replies[-1]
        if isinstance(reply, NoScriptError) and request.fallback is not None:
            # The node restarted or flushed its scripts: EVAL runs it and caches it.
            link.pool.loaded.clear()
            again = request._replace(commands=request.fallback)
            self._write(link, round_no, again, time.monotonic())
            return
        self.results[round_no][link.alias] = reply

    def _expire(self, now: float) -> None:
        for link in self.links.values():
            if link.expected and link.expected[0][2] <= now:
                waited = self.deadlines.command
                self._fail(link, TimeoutError(f"no answer within {waited * 1000:g} ms"))
            elif link.setup is not None and link.setup_until <= now:
                budget = self.deadlines.connect
                self._abandon_setup(
                    link, TimeoutError(f"no connection within {budget * 1000:g} ms")
                )

    def _fail(self, link: _Link, error: BaseException) -> None:
        """Give up on this node's connection: disconnected now, every owed reply fails."""
        if link.conn is not None:
            link.conn.disconnect()
            link.conn = None
        for round_no, *_ in link.expected:
            if round_no != _DROP:
                self.results[round_no].setdefault(link.alias, error)
        link.expected.clear()

    def _abandon_setup(self, link: _Link, error: BaseException) -> None:
        setup, link.setup = link.setup, None
        for round_no, _ in link.queued:
            if round_no != _DROP:
                self.results[round_no][link.alias] = error
        link.queued.clear()
        if setup is not None:
            node_pool.pool_when_ready(link.pool, setup)

    def close(self) -> None:
        """End the exchange: stragglers to the reaper, the rest back to their pools."""
        for link in self.links.values():
            if link.setup is not None and link.queued:
                self._send_when_ready(link)
            elif link.setup is not None:
                self._abandon_setup(link, TimeoutError("the call ended first"))
            if link.conn is None:
                continue
            if link.expected:
                pending = [(_due(entry[1]), entry[2]) for entry in link.expected]
                owed = self.behind[link.alias] = Owed(link.conn, link.pool, pending)
                node_pool.leave_behind(owed)
            else:
                link.pool.give_back(link.conn)
            link.conn, link.expected = None, []

    def _send_when_ready(self, link: _Link) -> None:
        """The call ends while this node's connection is being set up: its commands are
        written when it is ready (the node still gets them, as a straggler would)."""
        setup, queued = link.setup, link.queued
        link.setup, link.queued = None, []
        assert setup is not None
        until = link.setup_until + self.deadlines.command
        owed = self.behind[link.alias] = Owed(None, link.pool, [])
        owed.pending = [(request.replies, until) for _, request in queued]
        commands = [command for _, request in queued for command in self._commands(link, request)]
        node_pool.send_when_ready(link.pool, setup, owed, commands, self.deadlines.command)

    def __enter__(self) -> Exchange:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _LoopWatch:
    """The sockets the running loop watches for one ``agather``: each registered once
    (``add_reader`` and ``remove_reader`` for every wait cost ~40 µs a 5-node cycle),
    and again only if its descriptor now belongs to another socket."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.socks: dict[int, Any] = {}  # fd -> the socket registered under it
        self.woken: asyncio.Future[None] | None = None

    def _wake(self) -> None:
        if self.woken is not None and not self.woken.done():
            self.woken.set_result(None)

    async def wait(self, socks: dict[int, Any], timeout: float) -> list[int]:
        """The fds of ``socks`` readable within ``timeout``."""
        ready = node_pool.ready(list(socks), 0)
        if ready or timeout <= 0:
            return ready
        for fd in [fd for fd, sock in self.socks.items() if socks.get(fd) is not sock]:
            self.loop.remove_reader(fd)  # closed or replaced (a closed fd is fine here)
            del self.socks[fd]
        for fd, sock in socks.items():
            if fd not in self.socks:
                self.loop.add_reader(fd, self._wake)
                self.socks[fd] = sock
        self.woken = self.loop.create_future()
        timer = self.loop.call_later(timeout, self._wake)  # cheaper than asyncio.wait
        try:
            await self.woken
        finally:
            timer.cancel()
        return node_pool.ready(list(socks), 0)

    def close(self) -> None:
        for fd in self.socks:
            self.loop.remove_reader(fd)
        self.socks.clear()


def loop_supports(loop: asyncio.AbstractEventLoop) -> bool:
    """True when ``loop`` can watch sockets (``add_reader``: not the Windows proactor)."""
    return getattr(type(loop), "add_reader", None) is not asyncio.AbstractEventLoop.add_reader


def _resp(commands: tuple[tuple[Any, ...], ...], encode: Callable[[Any], Any]) -> bytes:
    """``commands`` in RESP, each argument encoded as redis-py would (its own packer
    cost more than writing to five nodes: cProfile of 1,000 5-node cycles)."""
    parts = []
    for command in commands:
        name = command[0]
        if " " in name if isinstance(name, str) else b" " in name:
            raise ValueError(f"one word per argument: {name!r}")
        parts.append(b"*%d\r\n" % len(command))
        for arg in command:
            data = arg if type(arg) is bytes else encode(arg)
            parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _fileno(conn: Any) -> int:
    sock = conn._sock
    return -1 if sock is None else int(sock.fileno())


def _due(request: Request | int) -> int:
    return request if isinstance(request, int) else request.replies


__all__ = [
    "PARTIAL_REPLY_WAIT",
    "Enough",
    "Exchange",
    "Request",
    "loop_supports",
    "request_of",
    "supports",
]
