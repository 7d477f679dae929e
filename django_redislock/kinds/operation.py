"""An operation of a lock kind as a value: which script, on which keys, with which
arguments, and how to read its reply. A transport sends it; nothing else builds one."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ..scripts import Script


class Operation(NamedTuple):
    """One script call of a lock kind (see :mod:`django_redislock.kinds`)."""

    script: Script
    keys: Sequence[str]
    args: Sequence[Any]
    #: Turns the script's raw reply into the kind's typed result.
    parse: Callable[[Any], Any]
    #: It gives or keeps ownership: a replicated transport waits for replicas after it.
    durable: bool = False
    #: For how long it gives ownership (ms): a quorum transport trusts the majority's
    #: answer for this long, less the clock-drift margin.
    ttl_ms: int | None = None


def is_one(reply: Any) -> bool:
    """The reply of a compare-token script: 1 when it acted, 0 when the token was gone."""
    return reply == 1


def raw(reply: Any) -> Any:
    """The reply as Redis sent it."""
    return reply


def text(value: Any) -> str:
    """A reply field as text (replies are bytes, or str on a decoding connection)."""
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


__all__ = ["Operation", "is_one", "raw", "text"]
