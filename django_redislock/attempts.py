"""The bookkeeping of one acquire call: its token, deadline, waiter, place in line
(the ms it has waited, sent with each attempt: longest waiter first), the pauses
between attempts, and whether a release's hand-over is still live."""

from __future__ import annotations

import logging
from typing import Any

from . import events, waiting
from .clock import now as clock
from .kinds.mutex import Busy

acquire_logger = logging.getLogger("django_redislock.acquire")

#: Upper bound of one wait while subscribed, a safety net for a lost message.
MAX_SUBSCRIBED_WAIT = 2.0
#: How long the longest waiter's claim on the next turn lives without a refresh.
#: A waiter refreshes it at least every MAX_SUBSCRIBED_WAIT; a crashed waiter's
#: claim holds others back at most this long.
CLAIM_MS = int((MAX_SUBSCRIBED_WAIT + 0.5) * 1000)

#: How far this host's clock and the server's may run apart per second of waiting
#: (1000 ppm, twice the most NTP slews a clock): a hand-off's start is moved back by it.
CLOCK_RATE_ERROR = 0.001


class Attempts:
    """The bookkeeping of one ``acquire()`` / ``aacquire()`` call: token, deadline,
    the waiter and how long to sleep between attempts. Shared by both twins,
    which differ only in how they call Redis and how they sleep."""

    __slots__ = (
        "alias",
        "contended",
        "deadline",
        "delays",
        "first",
        "lock",
        "loop",
        "refused_ms",
        "refused_sent",
        "sent",
        "token",
        "waited_ms",
        "waiter",
    )

    def __init__(self, lock: Any, wait_for: float | None, loop: Any = None) -> None:
        self.lock = lock
        self.loop = loop
        self.token = lock._new_token()
        self.first = clock()
        self.deadline = None if wait_for is None else self.first + wait_for
        self.alias = lock._wake_alias()
        self.delays = waiting.backoff_delays()
        # Already subscribed (a busy lock): register first, so no retry is needed.
        self.waiter = (
            None
            if self.alias is None
            else waiting.register_if_confirmed(
                self.alias, lock.keys.channel, loop=loop, token=self.token
            )
        )
        #: ms this acquire has waited, sent with each attempt: longest waiter first.
        #: Above 0, a refused attempt claims the next turn or a place in line. A waiter
        #: already subscribed can be handed the lock from its first attempt on; one
        #: that will not wait (``blocking=False``, ``timeout=0``) takes no place: a
        #: release would hand it a lock it has left.
        will_wait = self.deadline is None or self.deadline > self.first
        self.waited_ms = 1 if self.waiter is not None and will_wait else 0
        lock.busy_holder = None
        # The last refused attempt: clock() before it was sent, the server's clock (ms).
        self.refused_sent = self.first
        self.refused_ms: int | None = None
        #: Attempts sent so far; whether the first refusal was reported (``contended``).
        self.sent = 0
        self.contended = False

    def before_attempt(self) -> None:
        self.sent += 1
        if self.waiter is not None:
            self.waiter.clear()

    def won(self, fence: int, started: float, token: str | None = None) -> bool:
        """The lock is ours: under our token, or the one the winning attempt wrote."""
        if self.waiter is not None:
            self.waiter.acquired = True
        self.lock._took(
            token or self.token,
            fence,
            started,
            in_loop=self.loop is not None,
            waited=clock() - self.first,
            attempts=self.sent,
        )
        return True

    def report(self, type_: str, **fields: Any) -> None:
        """Report an outcome of this acquire other than a grant (:mod:`.events`)."""
        self.lock._emit(type_, waited=clock() - self.first, attempts=self.sent, **fields)

    def refused(self, attempt: Busy) -> None:
        """A refusal after which this acquire waits: the first one is ``contended``."""
        if not self.contended:
            self.contended = True
            self.report(events.CONTENDED, holder=attempt.holder)

    def gave_up(self, attempt: Busy) -> None:
        """Refused with no time left: ``busy`` if it would not wait at all, else
        ``timed_out``."""
        type_ = events.BUSY if self.deadline == self.first else events.TIMED_OUT
        self.report(type_, holder=attempt.holder)

    def live_hand_off(self) -> tuple[int, float] | None:
        """(fence, clock() when it was handed over) of a release's hand-off to us.

        ``None`` when none came, and when it cannot be shown to be live: the waiter
        may have been paused past the handed key's TTL, and someone else may hold
        the lock now. The server's clock in the message, against the one of our
        last refused attempt (sent at ``refused_sent``), gives a start no later
        than the real one; without them the next attempt tells (the acquire
        script grants a key that already holds our token).
        """
        waiter = self.waiter
        if waiter is None or waiter.granted is None:
            return None
        grant, waiter.granted = waiter.granted, None
        if grant.handed_at_ms is None or self.refused_ms is None:
            return None
        now = clock()
        # -1 ms: both readings are truncated to the ms. Minus the clocks' rate error.
        handed = self.refused_sent + (grant.handed_at_ms - self.refused_ms - 1) / 1000
        handed -= (now - self.refused_sent) * CLOCK_RATE_ERROR
        lock = self.lock
        if now >= handed + lock.validity:
            acquire_logger.info(
                "A hand-off of %r came too late to use (%.3fs after it was made); waiting on",
                lock.name,
                now - handed,
            )
            return None
        return grant.fence, handed

    def next_pause(self, attempt: Busy, started: float) -> float | None:
        """After a refused attempt: seconds to sleep, or None when the timeout ran out.

        The wait is "confirming" right after subscribing (the confirmation wakes
        us), "subscribed" (a release wakes us) or backoff (no pub/sub); it never
        runs past the holder's expiry or our deadline.
        """
        lock = self.lock
        pttl_ms = attempt.wait_ms
        self.refused_sent, self.refused_ms = started, attempt.server_ms
        lock.last_holder_ttl = pttl_ms / 1000 if pttl_ms > 0 else None
        lock.busy_holder = attempt.holder
        now = clock()
        if self.deadline is not None and now >= self.deadline:
            acquire_logger.debug("gave up on %r", lock.name)
            return None
        # From the second attempt on we are a waiter with a place in line.
        self.waited_ms = max(1, int((now - self.first) * 1000))
        if self.waiter is None and self.alias is not None:
            self.waiter = waiting.register(
                self.alias, lock.keys.channel, loop=self.loop, token=self.token
            )
            wait = waiting.CONFIRM_TIMEOUT
        elif self.waiter is not None and self.waiter.subscribed:
            wait = MAX_SUBSCRIBED_WAIT
        else:
            wait = next(self.delays)
        if pttl_ms > 0:  # never sleep past the moment the holder's lock expires
            wait = min(wait, pttl_ms / 1000 + 0.001)
        if self.deadline is not None:
            wait = min(wait, self.deadline - clock())
        return max(wait, 0.0)

    def close(self) -> None:
        if self.waiter is not None:
            self.waiter.close()


__all__ = ["CLAIM_MS", "CLOCK_RATE_ERROR", "MAX_SUBSCRIBED_WAIT", "Attempts"]
