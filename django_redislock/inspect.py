"""Looking at held locks from outside: what the admin page and the command use."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from . import signals
from .conf import get_config
from .connection import lock_client
from .exceptions import LockBackendUnavailable, RedisLockError
from .keys import LockKeys, validate_name, validate_prefix
from .lock import UNREACHABLE
from .scripts import FORCE_RELEASE


@dataclass(frozen=True)
class LockOwner:
    """Where the holder runs."""

    host: str
    pid: int | None
    thread: str

    def __str__(self) -> str:
        pid = "?" if self.pid is None else self.pid
        return f"{self.host}:{pid}/{self.thread}" if self.thread else f"{self.host}:{pid}"


@dataclass(frozen=True)
class LockInfo:
    """One held lock, as read from Redis."""

    name: str
    key: str
    #: Seconds of TTL left (``None`` if the key has no TTL, which our locks never do).
    ttl: float | None
    owner: LockOwner
    #: What the lock guards: a view's dotted path, ``manage.py <command>``, a function.
    purpose: str
    acquired_at: dt.datetime | None
    fence: int | None
    watchdog: bool
    connection: str
    #: The holder's token: what a token-checked force-release needs. Treat as a secret.
    token: str

    @property
    def short_token(self) -> str:
        """The first characters of the token: enough to tell holders apart."""
        return self.token[:6] + "…"


def _text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def build_info(
    name: str, key: str, token: Any, pttl: int, meta: dict[Any, Any], alias: str
) -> LockInfo:
    """A :class:`LockInfo` from the raw replies of GET, PTTL and HGETALL."""
    fields = {_text(k): _text(v) for k, v in (meta or {}).items()}
    pid = fields.get("pid", "")
    stamp = fields.get("acquired_at", "")
    try:
        acquired = dt.datetime.fromtimestamp(float(stamp), tz=dt.timezone.utc) if stamp else None
    except ValueError:
        acquired = None
    fence = fields.get("fence", "")
    return LockInfo(
        name=name,
        key=key,
        ttl=None if pttl is None or pttl < 0 else pttl / 1000,
        owner=LockOwner(
            host=fields.get("host", ""),
            pid=int(pid) if pid.isdigit() else None,
            thread=fields.get("thread", ""),
        ),
        purpose=fields.get("purpose", ""),
        acquired_at=acquired,
        fence=int(fence) if fence.isdigit() and fence != "0" else None,
        watchdog=fields.get("watchdog") == "1",
        connection=alias,
        token=_text(token),
    )


def _keys(name: str) -> LockKeys:
    return LockKeys.build(validate_prefix(get_config()["KEY_PREFIX"]), validate_name(name))


def _alias(connection: str | None) -> str:
    return get_config()["CONNECTION"] if connection is None else connection


def _unavailable(alias: str, name: str | None, exc: BaseException) -> RedisLockError:
    if isinstance(exc, UNREACHABLE):
        return LockBackendUnavailable(
            f"Redis of connection {alias!r} is unavailable: {exc}", lock_name=name, aliases=[alias]
        )
    return RedisLockError(f"Redis of connection {alias!r} refused a command: {exc}", lock_name=name)


def lock_info(name: str, *, connection: str | None = None) -> LockInfo | None:
    """What Redis says about lock ``name`` right now, or ``None`` if nobody holds it."""
    keys = _keys(name)
    alias = _alias(connection)
    try:
        pipe = lock_client(alias).pipeline(transaction=False)
        pipe.get(keys.key).pttl(keys.key).hgetall(keys.meta)
        token, pttl, meta = pipe.execute()
    except RedisError as exc:
        raise _unavailable(alias, name, exc) from exc
    if token is None:
        return None
    return build_info(name, keys.key, token, pttl, meta, alias)


def force_release(
    name: str, *, token: str | None = None, connection: str | None = None, user: Any = None
) -> bool:
    """Delete lock ``name`` whoever holds it, and wake its waiters.

    With ``token``, delete it only if that holder still holds it (so a lock that
    changed hands since you looked is left alone). Returns True when a lock was
    deleted. The fence counter is kept, so the next holder's fence is higher.
    Sends ``lock_force_released``.
    """
    info = lock_info(name, connection=connection)
    keys = _keys(name)
    alias = _alias(connection)
    try:
        result = FORCE_RELEASE(
            lock_client(alias), [keys.key, keys.meta], [keys.channel, token or ""]
        )
    except RedisError as exc:
        raise _unavailable(alias, name, exc) from exc
    if result != 1:
        return False
    signals.lock_force_released.send(
        sender=_lock_class(), info=info, name=name, connection=alias, user=user
    )
    return True


def _lock_class() -> type:
    from .lock import Lock

    return Lock


def held_locks(
    pattern: str = "*", *, connection: str | None = None, count: int | None = None
) -> Iterator[LockInfo]:
    """Every held lock whose name matches the glob ``pattern`` (SCAN, never KEYS)."""
    raise NotImplementedError("held_locks is being written (issue 5)")
