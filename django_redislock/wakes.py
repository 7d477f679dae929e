"""How one waiter sleeps until a release wakes it: :class:`ThreadWake` in a thread,
:class:`LoopWake` as a task, behind one :class:`Waiter` the subscriber
(:mod:`django_redislock.subscriber`) wakes; and the backoff used when no subscriber can."""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .wakeups import Wakeup

if TYPE_CHECKING:
    from .subscriber import AliasListener


def backoff_delays(base: float = 0.002, cap: float = 0.064) -> Iterator[float]:
    """Full-jitter exponential backoff: 0..base, 0..2*base, ... capped at ``cap``."""
    attempt = 0
    while True:
        yield random.uniform(0, min(cap, base * (2**attempt)))
        attempt = min(attempt + 1, 16)


class ThreadWake:
    """The wake-up of a waiter blocked in a thread: a :class:`threading.Event`.

    With a ``listener``, the thread may wait by reading the subscriber's socket itself
    (:meth:`AliasListener.lead`): a hand-off to it then wakes one thread, not two.
    """

    __slots__ = ("_event", "listener")

    def __init__(self, listener: AliasListener | None = None) -> None:
        self._event = threading.Event()
        self.listener = listener

    def set(self) -> None:
        """Wake it (from any thread)."""
        self._event.set()
        listener = self.listener
        if listener is not None and listener.leader is self:
            listener.interrupt_leader()

    def clear(self) -> None:
        self._event.clear()

    def is_set(self) -> bool:
        return self._event.is_set()

    def wait(self, seconds: float) -> bool:
        """Block up to ``seconds``; True when woken."""
        listener = self.listener
        if listener is not None and not self._event.is_set():
            woken = listener.lead(self, seconds)
            if woken is not None:
                return woken
        return self._event.wait(max(seconds, 0.0))


class LoopWake:
    """The wake-up of a waiter that is a task of ``loop``: a flag and a future, touched
    only in the loop's thread (:meth:`set` hands over to it)."""

    __slots__ = ("_future", "_loop", "_woken")

    def __init__(self, loop: Any) -> None:
        self._loop = loop
        self._woken = False
        self._future: asyncio.Future[bool] | None = None

    def set(self) -> None:
        """Wake it (from any thread). A closed loop (RuntimeError) has nobody waiting."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._set_in_loop)

    def _set_in_loop(self) -> None:
        self._woken = True
        if self._future is not None and not self._future.done():
            self._future.set_result(True)

    def clear(self) -> None:
        self._woken = False

    def is_set(self) -> bool:
        return self._woken

    async def wait(self, seconds: float) -> bool:
        """Await up to ``seconds``; True when woken.

        A plain future with a timer rather than ``asyncio.wait_for``, which on
        Python 3.11 can swallow a cancel that races with the wake-up.
        """
        if self._woken:
            return True
        future: asyncio.Future[bool] = self._loop.create_future()
        self._future = future
        timer = self._loop.call_later(max(seconds, 0.0), _resolve, future, False)
        try:
            return await future
        finally:
            timer.cancel()
            self._future = None


class Waiter:
    """One blocked acquirer, woken by a release on its lock's channel.

    What to wake and when is decided here, once; how a thread or a task sleeps
    until woken is its ``wake`` (:class:`ThreadWake` or :class:`LoopWake`), which
    the drivers wait on (:class:`~django_redislock.steps.Wait`).
    """

    __slots__ = ("_listener", "acquired", "channel", "granted", "token", "wakeup")

    def __init__(
        self, listener: AliasListener, channel: bytes, loop: Any = None, token: str = ""
    ) -> None:
        self._listener = listener
        self.channel = channel
        #: The acquirer's token: a release that hands the lock over names it.
        self.token = token.encode()
        #: The message of a release that handed the lock straight to this waiter.
        self.granted: Wakeup | None = None
        #: How this waiter sleeps until woken: in a thread, or as a task of ``loop``.
        self.wakeup: ThreadWake | LoopWake = (
            ThreadWake(listener) if loop is None else LoopWake(loop)
        )
        #: Set by the acquirer when it got the lock (a wake it did not use is passed on).
        self.acquired = False

    @property
    def subscribed(self) -> bool:
        """True once the subscription is confirmed and the subscriber is healthy."""
        return self._listener.is_confirmed(self.channel)

    def wake(self) -> None:
        """Wake the waiter (from any thread)."""
        self.wakeup.set()

    def clear(self) -> None:
        self.wakeup.clear()

    @property
    def woken(self) -> bool:
        """A wake-up arrived that no attempt has used yet."""
        return self.wakeup.is_set()

    def close(self) -> None:
        # A release woke us but we leave without the lock: wake the next one.
        self._listener.remove(self, pass_wake=self.woken and not self.acquired)


def _resolve(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)
