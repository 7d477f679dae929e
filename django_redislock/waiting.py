"""Waking waiters when a lock is released, with one subscriber per process.

A release publishes on the lock's channel. Each process keeps ONE daemon thread
that owns one pub/sub connection per lock connection alias; local waiters (a
thread blocked in ``acquire`` or a task awaiting ``aacquire``) register for a
lock name and are woken when a release for that name arrives. No connection is
held per waiter and nobody polls Redis at a fixed interval.

Each subscriber also listens on its process's own wake channel (``P:wake:<id>``,
:func:`~django_redislock.wakeups.wake_id`): a waiter that claims a turn names it, and
the release that hands the lock over publishes there, so only the heir's process wakes
for a hand-off. The other messages (free, out of turn, a semaphore's turn) stay on the
lock's channel.

A thread that waits may read that connection itself instead of sleeping on an event
(one thread at a time, :meth:`~django_redislock.subscriber.AliasListener.lead`): a
hand-off to it then wakes one thread, not the subscriber thread and then the waiter. It
dispatches every message it reads, other waiters' included, and the subscriber thread
leaves the socket to it.

A waiter registers, waits for the subscription to be confirmed, then retries:
a release that happened before the subscription is caught by that retry. If
the subscriber is down, waiters fall back to jittered backoff
(:func:`~django_redislock.wakes.backoff_delays`); every wait is also bounded by the
holder's remaining TTL, so a crashed holder's lock is picked up as soon as it expires.

The pieces live by job: how a waiter sleeps (:mod:`~django_redislock.wakes`), the
subscriber of one alias (:mod:`~django_redislock.subscriber`), the wake id and the
messages (:mod:`~django_redislock.wakeups`); this module keeps one subscriber per alias
and registers waiters with it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver

from .subscriber import AliasListener
from .wakes import LoopWake, ThreadWake, Waiter, backoff_delays
from .wakeups import wake_channel, wake_id

#: How long to wait for the subscriber's confirmation before using backoff.
CONFIRM_TIMEOUT = 1.0

_listeners: dict[str, AliasListener] = {}
_listeners_lock = threading.Lock()


def _listener(alias: str) -> AliasListener:
    listener = _listeners.get(alias)
    if listener is None:
        with _listeners_lock:
            listener = _listeners.get(alias)
            if listener is None:
                listener = _listeners[alias] = AliasListener(alias)
    return listener


def register(alias: str, channel: str, *, loop: Any = None, token: str = "") -> Waiter:
    """Register a waiter for releases of ``channel`` on ``alias``; close it when done."""
    listener = _listener(alias)
    waiter = Waiter(listener, channel.encode(), loop, token)
    listener.add(waiter)
    return waiter


def register_if_confirmed(
    alias: str, channel: str, *, loop: Any = None, token: str = ""
) -> Waiter | None:
    """A waiter already subscribed (the channel is hot), or None: cheap on a cold lock."""
    listener = _listeners.get(alias)
    if listener is None:
        return None
    encoded = channel.encode()
    if not listener.is_confirmed(encoded):
        return None  # no waiter built (an Event, a Condition) on the uncontended path
    waiter = Waiter(listener, encoded, loop, token)
    return waiter if listener.add_if_confirmed(waiter) else None


@receiver(setting_changed)
def _settings_changed(*, setting: str, **kwargs: Any) -> None:
    # New connection settings: stop the subscribers; new waiters start fresh ones.
    if setting in ("CACHES", "REDISLOCK"):
        with _listeners_lock:
            stale = list(_listeners.values())
            _listeners.clear()
        for listener in stale:
            listener.stop()


def _reset_after_fork() -> None:
    # The subscriber thread does not exist in a forked child: start afresh (the child's
    # wake id is new too: wakeups.py).
    global _listeners_lock
    _listeners.clear()
    _listeners_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_after_fork)


__all__ = [
    "CONFIRM_TIMEOUT",
    "LoopWake",
    "ThreadWake",
    "Waiter",
    "backoff_delays",
    "register",
    "register_if_confirmed",
    "wake_channel",
    "wake_id",
]
