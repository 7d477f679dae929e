"""Lock names and the Redis key layout.

A lock named ``N`` under prefix ``P`` keeps every key in one hash slot by
wrapping the name in a hash tag: ``P:{N}`` holds the token (a ``Lock``'s: with its fence
and holder description, ``scripts/held.lua``), and companion keys ``P:{N}:fence``
(counter, no TTL), ``P:{N}:meta`` (a semaphore's or read-write lock's holders' metadata;
beside an older build's ``Lock`` key, its holder's; same TTL),
``P:{N}:claim`` (the longest waiter's claim on the next turn, short TTL) and
``P:{N}:line`` (the waiters behind it, each place with its own deadline) live
beside it; a semaphore's or read-write lock's ``P:{N}:waiting`` and
``P:{N}:waiting:until`` say who waits in its line (``scripts/waiting.lua``). Releases
are published on channel ``P:{N}:released``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .exceptions import InvalidLockName

MAX_NAME_LENGTH = 256
#: The longest TTL or timeout accepted: 100 years. Redis refuses far larger
#: expiry times, and a lock that long is a bug, not a plan.
MAX_SECONDS = 100 * 365 * 24 * 3600


def validate_name(name: object) -> str:
    """Return ``name`` if it is a valid lock name, else raise :class:`InvalidLockName`."""
    if not isinstance(name, str):
        raise InvalidLockName(f"Lock name must be a str, not {type(name).__name__}: {name!r}")
    if not name:
        raise InvalidLockName("Lock name must not be empty.")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidLockName(
            f"Lock name is {len(name)} characters long; the limit is {MAX_NAME_LENGTH}: "
            f"{name[:40]!r}...",
            lock_name=name[:MAX_NAME_LENGTH],
        )
    if not name.isprintable():
        raise InvalidLockName(
            f"Lock name must be printable (no control characters): {name!r}", lock_name=name
        )
    if "{" in name or "}" in name:
        raise InvalidLockName(
            f"Lock name must not contain '{{' or '}}' (Redis hash-tag characters): {name!r}",
            lock_name=name,
        )
    return name


def validate_prefix(prefix: object) -> str:
    """Return a valid key prefix or raise ``ValueError``."""
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise ValueError(
            f"REDISLOCK['KEY_PREFIX'] must be a non-empty str without braces, not {prefix!r}"
        )
    return prefix


def validate_seconds(value: object, what: str, *, allow_zero: bool) -> float:
    """Check a duration in seconds: a finite real number, > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} must be a number of seconds, not {value!r}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"{what} must be finite, not {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{what} must be {bound}, not {value!r}")
    if value > MAX_SECONDS:
        raise ValueError(f"{what} must be at most {MAX_SECONDS} seconds (100 years), not {value!r}")
    return value


def ttl_milliseconds(value: object, what: str = "ttl") -> int:
    """Validate a TTL given in seconds; return it as whole milliseconds (at least 1)."""
    seconds = validate_seconds(value, what, allow_zero=False)
    millis = round(seconds * 1000)
    if millis < 1:
        raise ValueError(f"{what} must be at least 0.001 seconds (1 ms), not {value!r}")
    return millis


@dataclass(frozen=True, slots=True)
class LockKeys:
    """Every Redis name belonging to one lock."""

    name: str
    key: str
    fence: str
    meta: str
    channel: str
    claim: str
    line: str

    @classmethod
    def build(cls, prefix: str, name: str) -> LockKeys:
        key = f"{prefix}:{{{name}}}"
        return cls(
            name,
            key,
            f"{key}:fence",
            f"{key}:meta",
            f"{key}:released",
            f"{key}:claim",
            f"{key}:line",
        )


def name_from_key(prefix: str, key: str) -> str | None:
    """The lock name of a lock key ``P:{N}``, or ``None`` for any other key."""
    head = f"{prefix}:{{"
    if key.startswith(head) and key.endswith("}") and "}" not in key[len(head) : -1]:
        return key[len(head) : -1]
    return None
