"""Connections to the nodes of a quorum, for calls sent from the caller's thread
(:mod:`django_redislock.transports.quorum`).

Each node has a pool of idle connections of its own: nothing else reads from them, so
a reply never lands in someone else's hands. A call that returned as soon as a
majority decided can leave replies owed on a node's connection (a straggler): the
connection goes to the *reaper*, one daemon thread per process that reads those replies
as they arrive and pools the connection again, or disconnects it at once when its
deadline passes. A later call of the same lock on that node takes the connection back
from the reaper and writes behind the owed replies, so it can never overtake them.

New connections are set up (connect, handshake, script loading) in a small thread pool,
within their own budget, so a node that accepts connections and never answers does not
hold up a caller a majority has already answered.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import select
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import ResponseError

from ..connection import lock_client, on_reset, park_inherited

_SOCKET_CLASSES = (redis.Connection, redis.SSLConnection, redis.UnixDomainSocketConnection)
#: Idle connections kept per node; more are closed as they come back.
MAX_IDLE = 64
#: How long a connection left behind rests before the reaper reads it (see _Reaper).
REST = 0.002


class Owed:
    """A connection with replies still owed on it: how many, and until when each. While
    the connection is still being set up (``setup``), the commands to write on it."""

    __slots__ = ("claimed", "commands", "conn", "pending", "pool", "setup")

    def __init__(self, conn: Any, pool: NodePool, pending: list[tuple[int, float]]) -> None:
        self.conn, self.pool, self.pending = conn, pool, pending
        self.setup: concurrent.futures.Future[Any] | None = None
        self.commands: list[tuple[Any, ...]] = []
        self.claimed = False  # the setup's connection was taken (by its callback or a call)


# Who gets a connection left behind: the reaper, or the lock's next call.
_handoff = threading.Lock()


class NodePool:
    """Idle connections to one node, and how to make a new one."""

    __slots__ = ("client", "connection_class", "idle", "kwargs", "loaded", "lock", "retired")

    def __init__(self, client: Any, connection_class: type, kwargs: dict[str, Any]) -> None:
        self.client, self.connection_class, self.kwargs = client, connection_class, kwargs
        self.idle: list[Any] = []
        # The settings changed: connections that come back are closed, not pooled.
        self.retired = False
        self.loaded: set[str] = set()  # script SHAs this node has, as far as we know
        self.lock = threading.Lock()

    def take(self, check: bool = True) -> Any | None:
        """An idle connection that is still good, or None. ``check=False``: the caller
        checks it (nothing to read on an idle connection) itself."""
        while True:
            with self.lock:
                if not self.idle:
                    return None
                conn = self.idle.pop()
            if not check:
                return conn
            try:
                if not conn.can_read(timeout=0):
                    return conn
            except Exception:  # closed under us
                pass
            conn.disconnect()  # the server closed it while it sat idle (or it is dirty)

    def give_back(self, conn: Any) -> None:
        with self.lock:
            if not self.retired and len(self.idle) < MAX_IDLE:
                self.idle.append(conn)
                return
        conn.disconnect()

    def connect(self, budget: float, scripts: Sequence[Any]) -> Any:
        """A new connection, each step of its setup within ``budget`` seconds; the
        scripts the node may not have yet are loaded on it."""
        conn = self.connection_class(
            **{**self.kwargs, "socket_timeout": budget, "socket_connect_timeout": budget}
        )
        try:
            conn.connect()
            for script in scripts:
                if script.sha not in self.loaded:
                    # An error reply (scripting refused...) is left for EVAL to report.
                    with contextlib.suppress(ResponseError):
                        conn.send_command("SCRIPT", "LOAD", script.source)
                        conn.read_response()
                    self.loaded.add(script.sha)
        except BaseException:
            conn.disconnect()
            raise
        return conn

    def close(self) -> None:
        with self.lock:
            self.retired = True
            idle, self.idle = self.idle, []
        for conn in idle:
            conn.disconnect()


def _factory(client: Any) -> tuple[type, dict[str, Any]] | None:
    pool = getattr(client, "connection_pool", None)
    if type(pool) is not redis.ConnectionPool and not isinstance(
        pool, redis.BlockingConnectionPool
    ):
        return None  # Sentinel and custom pools pick their server themselves
    if not issubclass(pool.connection_class, _SOCKET_CLASSES):
        return None  # no socket to poll (fakeredis...)
    return pool.connection_class, dict(pool.connection_kwargs)


_pools: dict[str, NodePool] = {}
_pid = os.getpid()
_lock = threading.Lock()


def pool_of(alias: str) -> NodePool | None:
    """The node pool of ``alias``, or None when the node cannot be driven from a thread."""
    client = lock_client(alias)
    pool = _pools.get(alias)
    if pool is not None and pool.client is client and _pid == os.getpid():
        return pool
    built = _factory(client)
    if built is None:
        return None
    with _lock:
        _forget_if_forked()
        pool = _pools.get(alias)
        if pool is None or pool.client is not client:
            if pool is not None:  # the settings changed: the old node's connections go
                pool.close()
            pool = _pools[alias] = NodePool(client, *built)
        return pool


def _retire_all() -> None:
    """The settings changed: every node pool closes its idle connections, and those of
    calls still running when they come back."""
    with _lock:
        pools = list(_pools.values()) if _pid == os.getpid() else []
        _pools.clear()
    for pool in pools:
        pool.close()


on_reset(_retire_all)


def _forget_if_forked() -> None:
    global _pid, _executor, _reaper
    if _pid != os.getpid():
        # The parent's sockets: never used, never closed (shut down) from here.
        park_inherited((dict(_pools), _executor, _reaper))
        _pools.clear()
        _executor = _reaper = None
        _pid = os.getpid()


# -- setting up new connections -------------------------------------------------------
_executor: concurrent.futures.ThreadPoolExecutor | None = None


def set_up(pool: NodePool, budget: float, scripts: Sequence[Any]) -> concurrent.futures.Future[Any]:
    """Start setting up a new connection to ``pool``'s node in the setup threads."""
    global _executor
    with _lock:
        _forget_if_forked()
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=8, thread_name_prefix="redislock-connect"
            )
        executor = _executor
    return executor.submit(pool.connect, budget, scripts)


def pool_when_ready(pool: NodePool, setup: concurrent.futures.Future[Any]) -> None:
    """A setup nobody waits for any more: its connection joins the node's idle ones."""

    def callback(setup: concurrent.futures.Future[Any]) -> None:
        if not setup.cancelled() and setup.exception() is None:
            pool.give_back(setup.result())

    setup.add_done_callback(callback)


def send_when_ready(
    pool: NodePool,
    setup: concurrent.futures.Future[Any],
    owed: Owed,
    commands: list[tuple[Any, ...]],
    deadline: float,
) -> None:
    """A call returned before this node's connection was ready: write its ``commands``
    when it is (``owed.pending`` says how many replies each round owes), then leave the
    connection behind for the reaper, as any straggler."""

    def callback(setup: concurrent.futures.Future[Any]) -> None:
        with _handoff:
            if owed.claimed:  # the lock's next call took it over, commands and all
                return
            owed.claimed = True
            if setup.cancelled() or setup.exception() is not None:
                owed.pending.clear()
                return
            conn = setup.result()
            try:
                conn.send_packed_command(conn.pack_commands(commands), check_health=False)
            except Exception:
                conn.disconnect()
                owed.pending.clear()
                return
            until = time.monotonic() + deadline
            owed.conn, owed.pending = conn, [(count, until) for count, _ in owed.pending]
            leave_behind(owed)

    owed.setup, owed.commands = setup, commands
    setup.add_done_callback(callback)


# -- the reaper: replies owed after a call returned ------------------------------------
class _Reaper:
    """One daemon thread reading the replies owed on connections callers left behind.

    A connection left behind first *rests* for ``REST`` seconds: the lock's next call
    usually takes it back sooner, and waking this thread for every hand-off cost more
    than the rest of the exchange's bookkeeping (a 5-node cycle: ~50 µs of ~430). After
    its rest it is watched: read as its replies arrive, closed at its deadline.
    """

    def __init__(self) -> None:
        self.owed: dict[int, Owed] = {}  # watched, by file descriptor
        self.resting: list[tuple[float, Owed]] = []  # (watched from, owed)
        self.wake_at = float("inf")  # when the thread looks again at the latest
        self.lock = threading.Lock()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        self.thread = threading.Thread(target=self._run, name="redislock-reaper", daemon=True)
        self.thread.start()

    def add(self, owed: Owed) -> None:
        """Take ``owed`` (to rest first; the thread is woken only if it would look later)."""
        with self.lock:
            until = min(time.monotonic() + REST, owed.pending[0][1])
            self.resting.append((until, owed))
            wake = until < self.wake_at
            if wake:
                self.wake_at = until
        if wake:
            os.write(self.wake_w, b"x")

    def reclaim(self, owed: Owed) -> bool:
        """Take ``owed`` back from the reaper (False: it was settled or closed already)."""
        with self.lock:
            for i, (_, held) in enumerate(self.resting):
                if held is owed:
                    del self.resting[i]
                    return True
            for fd, held in list(self.owed.items()):
                if held is owed:
                    del self.owed[fd]
                    return True
        return False

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            with self.lock:
                fds = list(self.owed)
                looks = [o.pending[0][1] for o in self.owed.values() if o.pending]
                looks += [until for until, _ in self.resting]
                self.wake_at = min(looks, default=float("inf"))
            timeout = None if not looks else max(0.0, self.wake_at - now)
            readable = set(_ready([self.wake_r, *fds], timeout))
            if self.wake_r in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(self.wake_r, 4096)
            self._settle_due(readable, time.monotonic())

    def _settle_due(self, readable: set[int], now: float) -> None:
        with self.lock:  # taken out while read: a caller never waits on a slow reply
            due = [
                self.owed.pop(fd)
                for fd, owed in list(self.owed.items())
                if fd in readable or not owed.pending or owed.pending[0][1] <= now
            ]
            due += [owed for until, owed in self.resting if until <= now]
            self.resting = [(until, owed) for until, owed in self.resting if until > now]
        for owed in due:
            if not settle(owed):
                with self.lock:
                    self.owed[owed.conn._sock.fileno()] = owed


def settle(owed: Owed) -> bool:
    """Read the owed replies that are in (pool the connection when none is left), or
    disconnect it past a deadline. True when the connection left ``owed``'s hands."""
    conn = owed.conn
    try:
        while owed.pending:
            count, deadline = owed.pending[0]
            left = deadline - time.monotonic()
            if left <= 0 or not conn.can_read(timeout=0):
                if left <= 0:
                    conn.disconnect()  # given up on at its deadline: closed at once
                    owed.pending.clear()
                    return True
                return False
            conn._sock.settimeout(left)
            for _ in range(count):
                with contextlib.suppress(ResponseError):
                    conn.read_response()
            owed.pending.pop(0)
    except Exception:
        conn.disconnect()
        owed.pending.clear()
        return True
    owed.pool.give_back(conn)
    return True


_reaper: _Reaper | None = None


def leave_behind(owed: Owed) -> None:
    """The caller returns with replies owed on this connection: the reaper takes it."""
    global _reaper
    if settle(owed):  # in already (the common case: a straggler by microseconds)
        return
    with _lock:
        _forget_if_forked()
        if _reaper is None:
            _reaper = _Reaper()
        reaper = _reaper
    reaper.add(owed)


def reclaim(owed: Owed) -> str | None:
    """Take a connection left behind back, to write behind what is owed on it:
    ``"conn"`` (``owed.conn``, its replies owed), ``"setup"`` (still being set up:
    ``owed.setup``, with ``owed.commands`` not written yet) or None (settled, or closed)."""
    with _handoff:
        if owed.setup is not None and not owed.claimed:
            owed.claimed = True
            return "setup"
        reaper = _reaper
        if reaper is not None and _pid == os.getpid() and reaper.reclaim(owed):
            return "conn"
    return None


def _ready(fds: list[int], timeout: float | None) -> list[int]:
    """The descriptors with something to read within ``timeout`` seconds (None: no limit)."""
    if not hasattr(select, "poll"):  # Windows
        return select.select(fds, [], [], timeout)[0]
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLPRI)
    return [fd for fd, _ in poller.poll(None if timeout is None else timeout * 1000)]


ready = _ready

__all__ = [
    "MAX_IDLE",
    "REST",
    "NodePool",
    "Owed",
    "leave_behind",
    "pool_of",
    "pool_when_ready",
    "ready",
    "reclaim",
    "set_up",
    "settle",
]
