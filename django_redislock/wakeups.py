"""The wake-up messages a lock's release channel carries, in one place.

The Lua scripts publish them and :mod:`django_redislock.waiting` reads them. The
scripts name them (``WAKE_FREE``, ...); :class:`~django_redislock.scripts.Script`
defines those names as Lua locals from the constants below before it loads a script,
so the two sides cannot drift apart.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import NamedTuple

#: Released in turn: the longest-waiting local waiter tries again (one release, one winner).
FREE = "1"
#: Freed outside the turn order (force-release, a leaving heir): every waiter tries again,
#: so a claimant queued behind others in its process is not missed.
FREED_OUT_OF_TURN = "F"
#: Prefix of ``"T:<token>[,<token>...]"``: freed in turn, and these waiters are next in
#: the line (a semaphore's): only they try again, wherever they wait. A process's own
#: order of its waiters is not the line's (it registers them when first refused).
TURN_OF = "T:"
#: Prefix of ``"G:<token>:<fence>:<ms>"``: handed straight to the waiter holding ``token``,
#: which holds the lock with that fence (0 without fencing) from the server's clock
#: reading ``ms`` (milliseconds) on, for its TTL.
HANDED_TO = "G:"

#: The Lua local names the scripts use, and their values.
LUA_NAMES: dict[str, str] = {
    "WAKE_FREE": FREE,
    "WAKE_FREED_OUT_OF_TURN": FREED_OUT_OF_TURN,
    "WAKE_HANDED_TO": HANDED_TO,
    "WAKE_TURN_OF": TURN_OF,
}

_FREED_OUT_OF_TURN = FREED_OUT_OF_TURN.encode()
_HANDED_TO = HANDED_TO.encode()
_TURN_OF = TURN_OF.encode()


class Wakeup(NamedTuple):
    """One decoded message: who should wake, and what the heir was granted."""

    everyone: bool  # True: every local waiter; False: the longest-waiting one (or the heir)
    heir: bytes | None = None  # the token the lock was handed to, if any
    fence: int = 0  # the heir's fence
    #: The server's clock (ms) when it handed the lock over; None from an older release
    #: script that did not send it (the heir then confirms the hand-off with an attempt).
    handed_at_ms: int | None = None
    #: The waiters whose turn it is (a line's next), if the release named them.
    turn: frozenset[bytes] | None = None


def lua_prelude(source: str) -> str:
    """Lua ``local`` lines defining the wake-up names that ``source`` uses."""
    return "".join(
        f"local {name} = '{value}'\n"
        for name, value in LUA_NAMES.items()
        if re.search(rf"\b{name}\b", source)
    )


def decode(data: bytes) -> Wakeup:
    """Decode one message; anything unknown wakes the longest waiter (it retries safely)."""
    if data.startswith(_HANDED_TO):
        _, heir, fence, *at = data.split(b":", 3)
        return Wakeup(
            everyone=False, heir=heir, fence=int(fence), handed_at_ms=int(at[0]) if at else None
        )
    if data.startswith(_TURN_OF):
        return Wakeup(everyone=False, turn=frozenset(data[len(_TURN_OF) :].split(b",")))
    return Wakeup(everyone=data == _FREED_OUT_OF_TURN)


#: This process's wake id (a new one in a forked child): see :func:`wake_id`.
_wake_id = secrets.token_hex(8)


def wake_id() -> str:
    """This process's wake id: a waiter's claim names it, and the release that hands the
    lock over publishes on :func:`wake_channel`, where only this process listens."""
    return _wake_id


def wake_channel() -> bytes:
    """``P:wake:<id>``: under the key prefix, so an ACL's ``&P:*`` covers it."""
    from .conf import get_config

    return f"{get_config()['KEY_PREFIX']}:wake:{_wake_id}".encode()


def _new_wake_id_after_fork() -> None:
    # The parent's hand-offs must not wake the child, nor the reverse.
    global _wake_id
    _wake_id = secrets.token_hex(8)


os.register_at_fork(after_in_child=_new_wake_id_after_fork)
