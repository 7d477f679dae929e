"""The subscriber of one connection alias: one pub/sub connection and one daemon thread
per process, dispatching releases to the local :class:`~django_redislock.wakes.Waiter`
objects of each lock channel, and letting a waiting thread read the socket itself
(:meth:`AliasListener.lead`). :mod:`django_redislock.waiting` keeps one per alias."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

from redis.exceptions import RedisError

from .wakes import LoopWake, ThreadWake, Waiter, backoff_delays
from .wakeups import Wakeup, decode, wake_channel

# The module it came from: log filters and tests that name it keep working.
logger = logging.getLogger("django_redislock.waiting")

# The wake-up pipe is non-blocking and read and written with the OS's own calls:
# eventlet's monkey-patched os.read / os.write wait on an empty or full pipe instead of
# raising BlockingIOError (the subscriber then hung in a read, and waiters piled up
# writing). posix's are never patched; elsewhere (Windows) os's are the OS's own.
try:
    from posix import read as _fd_read
    from posix import write as _fd_write
except ImportError:  # pragma: no cover - not POSIX
    from os import read as _fd_read
    from os import write as _fd_write

#: Keep a channel subscribed this long after its last waiter left, so a busy
#: lock does not pay a SUBSCRIBE round trip per contended acquire.
LINGER_SECONDS = 5.0
#: After a waiting thread read the socket itself (see :meth:`AliasListener.lead`), the
#: subscriber thread leaves the socket to the next such thread this long before it reads
#: again, so that a process waiting turn after turn wakes one thread per hand-off.
PARK_SECONDS = 0.05
#: The least time a waiting thread gives the rest of a message it started to read.
LEADER_READ_MIN_SECONDS = 0.05


class AliasListener:
    """The subscriber thread's state for one connection alias."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        #: This process's wake channel: hand-offs to its waiters arrive here.
        self.own_channel = wake_channel()
        self._lock = threading.Lock()
        # Per channel, in arrival order: a release wakes the longest local waiter.
        self._waiters: dict[bytes, dict[Waiter, None]] = {}
        self._subscribed: set[bytes] = set()  # requested on the connection
        self._confirmed: set[bytes] = set()  # confirmed by the server
        self._linger: dict[bytes, float] = {}  # channel -> unsubscribe deadline
        self._pending = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread: threading.Thread | None = None
        self._healthy = True
        self.stopped = False
        #: The waiting thread's wake that reads the socket now, if any (see :meth:`lead`).
        self.leader: ThreadWake | None = None
        self._leader_ident = 0
        self._lead_r, self._lead_w = os.pipe()  # interrupts the leader's select()
        os.set_blocking(self._lead_r, False)
        os.set_blocking(self._lead_w, False)
        #: The subscriber's connection and its socket's descriptor while it serves one.
        self._served: tuple[Any, int] | None = None
        #: Held by whoever uses the connection: the subscriber thread or the leader.
        self._socket_lock = threading.Lock()
        self._parked_until = 0.0
        self._watching = False  # the subscriber thread selects on the socket

    # -- called from waiting threads / event loops ------------------------
    def add(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.setdefault(waiter.channel, {})[waiter] = None
            self._linger.pop(waiter.channel, None)
            if waiter.channel not in self._subscribed:
                self._pending = True
            already = waiter.channel in self._confirmed
            # A task cannot read the socket itself: the subscriber must, now.
            unserved = isinstance(waiter.wakeup, LoopWake) and not self._watching
            self._ensure_thread()
        if already:
            waiter.wake()
        if unserved or not already:
            self._poke()

    def add_if_confirmed(self, waiter: Waiter) -> bool:
        """Register ``waiter`` only if its channel is already subscribed and confirmed."""
        with self._lock:
            if not (self._healthy and waiter.channel in self._confirmed):
                return False
            self._waiters.setdefault(waiter.channel, {})[waiter] = None
            self._linger.pop(waiter.channel, None)
            unserved = isinstance(waiter.wakeup, LoopWake) and not self._watching
        if unserved:
            self._poke()
        return True

    def remove(self, waiter: Waiter, *, pass_wake: bool = False) -> None:
        with self._lock:
            waiters = self._waiters.get(waiter.channel)
            if waiters is None:
                return
            waiters.pop(waiter, None)
            if not waiters:
                del self._waiters[waiter.channel]
                self._linger[waiter.channel] = time.monotonic() + LINGER_SECONDS
                return
            following = next(iter(waiters)) if pass_wake else None
        if following is not None:
            following.wake()

    def is_confirmed(self, channel: bytes) -> bool:
        return self._healthy and channel in self._confirmed

    def _poke(self) -> None:
        # A full pipe (BlockingIOError) means the thread is being woken anyway.
        with contextlib.suppress(BlockingIOError):
            _fd_write(self._wake_w, b"x")

    # -- a waiting thread reads the socket itself ----------------------------
    def lead(self, wake: ThreadWake, seconds: float) -> bool | None:
        """Wait up to ``seconds`` for ``wake`` by reading the subscriber's socket in this
        thread: True when woken, False at the deadline, or None when another thread
        reads it (or there is no socket to read): then wait on the event.

        A hand-off then costs the heir one thread wake-up, where the subscriber thread
        reading it and waking the waiter costs two, each a wait for a CPU on a busy
        machine. Every message read here is dispatched as the subscriber would (other
        waiters included), under the lock that keeps the two readers apart.
        """
        served = self._served
        if served is None:
            return None
        with self._lock:
            if self.leader is not None or not self._healthy:
                return None
            self.leader, self._leader_ident = wake, threading.get_ident()
        fileno = served[1]
        deadline = time.monotonic() + seconds
        failed = False
        try:
            self._drain(self._lead_r)  # interrupts meant for an earlier leader
            while not wake.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                ready, _, _ = select.select([fileno, self._lead_r], [], [], left)
                if self._lead_r in ready:
                    self._drain(self._lead_r)
                if self._served is not served:
                    break  # reconnecting: wait on the event instead
                if fileno in ready and not self._read_as_leader(served, deadline):
                    break
            else:
                return True
        except Exception as exc:  # the subscriber thread sees it too, and reconnects
            logger.debug(
                "Lock subscriber for %r: a waiting thread's read failed: %r", self.alias, exc
            )
            failed = True
        finally:
            with self._lock:
                self.leader, self._leader_ident = None, 0
                self._parked_until = time.monotonic() + PARK_SECONDS
                others = any(w.wakeup is not wake for ws in self._waiters.values() for w in ws)
            if others or failed:
                self._poke()  # the subscriber reads for them (or finds the failure)
        return wake._event.wait(max(0.0, deadline - time.monotonic()))

    def _read_as_leader(self, served: tuple[Any, int], deadline: float) -> bool:
        """Read what the socket has for the leader; False when it must stop leading (the
        connection was replaced, or the subscriber thread kept the socket past the
        deadline: a message cut off mid-way keeps it reading)."""
        if not self._socket_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return False
        try:
            if self._served is not served:
                return False
            pubsub = served[0]
            if _can_read(pubsub):
                self._read_within(pubsub, deadline)
            return True
        finally:
            self._socket_lock.release()

    def _read_within(self, pubsub: Any, deadline: float) -> None:
        """Read what the socket has, bounded by the waiter's deadline: a message cut off
        mid-way (a network fault) must not keep an ``acquire()`` past its timeout."""
        sock = pubsub.connection._sock
        previous = sock.gettimeout()
        sock.settimeout(max(deadline - time.monotonic(), LEADER_READ_MIN_SECONDS))
        try:
            self._read_one(pubsub)
            self._handle_buffered(pubsub)
        finally:
            sock.settimeout(previous)

    def interrupt_leader(self) -> None:
        """End the leader's ``select()`` (it was woken from another thread)."""
        if threading.get_ident() != self._leader_ident:
            with contextlib.suppress(BlockingIOError):
                _fd_write(self._lead_w, b"x")

    def _reads_socket(self) -> bool:
        """Whether the subscriber thread reads the socket now (no thread leads, and none
        did a moment ago or someone waits that no thread reads for)."""
        with self._lock:
            if self.leader is not None:
                watching = False
            else:
                watching = bool(self._waiters) or time.monotonic() >= self._parked_until
            self._watching = watching
            return watching

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._run, name=f"redislock-subscriber-{self.alias}", daemon=True
            )
            self._thread.start()

    # -- the subscriber thread ---------------------------------------------
    def _run(self) -> None:
        from .exceptions import LockConfigurationError

        delays = backoff_delays(0.05, 2.0)
        while not self.stopped:
            try:
                self._serve()
            except (RedisError, OSError, ValueError) as exc:
                # Loud once when a working subscriber breaks, quiet while it stays down.
                log = logger.warning if self._healthy and not self.stopped else logger.debug
                log("Lock subscriber for %r lost its connection: %s", self.alias, exc)
            except LockConfigurationError as exc:
                # The alias is gone from the settings: waiters fall back to backoff.
                logger.debug("Lock subscriber for %r stops: %s", self.alias, exc)
                self.stopped = True
            except Exception:
                logger.exception("Lock subscriber for %r failed", self.alias)
            self._mark_down()
            if not self.stopped:
                self._idle(next(delays) + 0.05)

    def stop(self) -> None:
        """End the thread (settings changed); its waiters fall back to backoff."""
        self.stopped = True
        self._poke()

    def _mark_down(self) -> None:
        with self._lock:
            self._healthy = False
            self._subscribed.clear()
            self._confirmed.clear()
            self._pending = bool(self._waiters)
            waiters = [w for ws in self._waiters.values() for w in ws]
        # Wake everyone: a release may have been missed, and they now need backoff.
        for waiter in waiters:
            waiter.wake()

    def _idle(self, seconds: float) -> None:
        select.select([self._wake_r], [], [], seconds)
        self._drain_pipe()

    def _drain_pipe(self) -> None:
        self._drain(self._wake_r)

    @staticmethod
    def _drain(fd: int) -> None:
        with contextlib.suppress(BlockingIOError):
            while _fd_read(fd, 4096):
                pass

    def _serve(self) -> None:
        from .connection import pubsub_client

        pubsub = pubsub_client(self.alias).pubsub()
        try:
            while not self._channels_wanted():
                if self.stopped:
                    return
                self._idle(LINGER_SECONDS)
            with self._socket_lock:
                self._apply_changes(pubsub)
            fileno = _fileno(getattr(pubsub.connection, "_sock", None))
            if fileno is None:  # fakeredis: no real socket to select on
                while not self.stopped:
                    timeout = self._next_linger_timeout()
                    message = pubsub.get_message(timeout=min(timeout, 0.005))
                    if message is not None:
                        self._handle(message)
                    self._apply_changes(pubsub)
                    self._handle_buffered(pubsub)
                return
            self._served = (pubsub, fileno)
            while not self.stopped:
                timeout = self._next_linger_timeout()
                if self._reads_socket():
                    ready, _, _ = select.select([fileno, self._wake_r], [], [], timeout)
                    with self._socket_lock:
                        # First: the heir of a hand-off waits on it. Then what came with
                        # it, whoever leads now: a reply left in the client's buffer is
                        # one a leader's select() on the socket never sees.
                        if fileno in ready and _can_read(pubsub):
                            self._read_one(pubsub)
                        self._handle_buffered(pubsub)
                else:  # a waiting thread reads it (or did a moment ago)
                    ready, _, _ = select.select([self._wake_r], [], [], min(timeout, PARK_SECONDS))
                if self._wake_r in ready:
                    self._drain_pipe()
                with self._socket_lock:
                    self._apply_changes(pubsub)
        finally:
            with self._socket_lock:
                self._served = None
            self.interrupt_leader()
            with contextlib.suppress(Exception):
                pubsub.close()

    def _channels_wanted(self) -> bool:
        with self._lock:
            return bool(self._waiters)

    def _next_linger_timeout(self) -> float:
        with self._lock:
            if not self._linger:
                return 60.0
            return max(0.0, min(self._linger.values()) - time.monotonic())

    def _apply_changes(self, pubsub: Any) -> None:
        now = time.monotonic()
        with self._lock:
            expired = [ch for ch, deadline in self._linger.items() if deadline <= now]
            for channel in expired:
                del self._linger[channel]
            stop = [ch for ch in expired if ch in self._subscribed and ch not in self._waiters]
            start = [ch for ch in self._waiters if ch not in self._subscribed]
            if start and self.own_channel not in self._subscribed:
                # First, so it is confirmed no later than any lock channel: a waiter on
                # a confirmed channel may name it in a claim (the hand-off comes here).
                start.insert(0, self.own_channel)
            self._subscribed.difference_update(stop)
            self._confirmed.difference_update(stop)
            self._subscribed.update(start)
            self._pending = False
        if start:
            pubsub.subscribe(*start)
        if stop and pubsub.subscribed:
            pubsub.unsubscribe(*stop)

    def _handle_buffered(self, pubsub: Any) -> None:
        """Handle every reply already there (read with the one before, or buffered).

        Each reader of the socket calls it before it lets the socket go, so no complete
        reply stays in the client's buffer, where a ``select()`` on the socket cannot see
        it. Each reply is read, even one redis-py's ``get_message`` would answer with
        None (a health check's), which would have ended the loop early.
        """
        while _can_read(pubsub):
            self._read_one(pubsub)

    def _read_one(self, pubsub: Any) -> None:
        """The reply waiting on the connection, read without redis-py's ``get_message``
        around it (its checks and retry wrapper doubled the cost of the read, on the
        hand-off's path); anything but a message goes through redis-py's own handling,
        which keeps its subscription state."""
        response = pubsub.connection.read_response(disconnect_on_error=False, push_request=True)
        if isinstance(response, list) and len(response) == 3 and response[0] in _MESSAGE:
            self._on_message(response[1], response[2])
            return
        message = pubsub.handle_message(response)
        if message is not None:
            self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "message":
            self._on_message(message.get("channel"), message.get("data"))
        elif kind == "subscribe":
            channel = _as_bytes(message.get("channel"))
            if channel is None:
                return
            with self._lock:
                self._healthy = True
                if channel in self._subscribed:
                    self._confirmed.add(channel)
                waiters = list(self._waiters.get(channel, ()))
            for waiter in waiters:
                waiter.wake()

    def _on_message(self, channel: Any, data: Any) -> None:
        channel = _as_bytes(channel)
        if channel is None:
            return
        data = _as_bytes(data)
        wakeup = decode(data) if data is not None else Wakeup(everyone=False)
        with self._lock:
            local: Iterable[Waiter] = (
                itertools.chain.from_iterable(self._waiters.values())  # ours, any lock
                if channel == self.own_channel
                else self._waiters.get(channel, {})
            )
            if wakeup.heir is not None:
                # Handed straight to one waiter: if it is ours, it holds the
                # lock now; nobody else need wake.
                waiters = [w for w in local if w.token == wakeup.heir][:1]
                for waiter in waiters:
                    waiter.granted = wakeup
            elif wakeup.turn is not None:
                # The line's next (a semaphore's): only they can take the
                # permit; any other waiter woken would be refused again.
                waiters = [w for w in local if w.token in wakeup.turn]
            elif wakeup.everyone:
                # Freed outside the turn order (force-release, a leaving
                # heir): everyone retries, so a waiting claimant is not missed.
                waiters = list(local)
            else:
                # One release, one winner: wake only the longest-waiting
                # local waiter; it passes the wake on if it leaves without it.
                waiters = list(local)[:1]
        for waiter in waiters:
            waiter.wake()


#: A published message's kind, as RESP2 and RESP3 (push) replies name it.
_MESSAGE = (b"message", "message")


def _can_read(pubsub: Any) -> bool:
    """A reply (or part of one) is there to read: the other reader did not take it."""
    return bool(pubsub.connection.can_read(timeout=0))


def _as_bytes(value: Any) -> bytes | None:
    if isinstance(value, str):
        return value.encode()
    return value if isinstance(value, bytes) else None


def _fileno(sock: Any) -> int | None:
    # Only a real socket's: fakeredis's FakeSocket numbers itself from a counter, which
    # may be any real descriptor of this process (select() on it never sees a release).
    if not isinstance(sock, socket.socket):
        return None
    try:
        fileno = sock.fileno()
    except Exception:
        return None
    return fileno if isinstance(fileno, int) and fileno >= 0 else None
