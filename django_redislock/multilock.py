"""``MultiLock``: several lock names held together, all or none.

Each name is a part, a plain :class:`~django_redislock.Lock` (so a part is shown,
inspected and force-released like any lock, and on Redis Cluster each lives in its own
slot). Acquiring tries every part without waiting; when one is busy it gives back those it
took and waits for that one alone (woken by its release, in its line of waiters), then
tries the others again without waiting. So a MultiLock never holds a subset while it
waits, and MultiLocks over overlapping names, taken in any order, cannot deadlock.

The lifecycle is written once as steps (:mod:`django_redislock.steps`): each step is one
part's own ``acquire``/``release``/``extend`` (``aacquire``... for async callers), driven
by :func:`~django_redislock.drivers.run` or :func:`~django_redislock.drivers.arun`.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Generator, Iterable
from types import TracebackType
from typing import Any

from . import drivers, protocol
from .clock import now as clock
from .exceptions import (
    LockBackendUnavailable,
    LockLost,
    LockNotAcquired,
    LockNotOwned,
    RedisLockError,
)
from .keys import validate_name
from .lock import Lock
from .steps import Send, Step

release_logger = logging.getLogger("django_redislock.release")

#: How many names one MultiLock may hold.
MAX_NAMES = 64
#: A part's purpose is cut to this many characters.
_PURPOSE_CHARS = 200


def _validate_names(names: object) -> tuple[str, ...]:
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise ValueError(f"names must be a list of lock names, not {names!r}")
    checked = tuple(validate_name(name) for name in names)
    if not 2 <= len(checked) <= MAX_NAMES:
        raise ValueError(f"a MultiLock takes 2 to {MAX_NAMES} names, not {len(checked)}")
    if len(set(checked)) != len(checked):
        twice = sorted({name for name in checked if checked.count(name) > 1})
        raise ValueError(f"a MultiLock's names must be distinct; given twice: {twice}")
    return checked


class MultiLock:
    """Every name in ``names`` (2 to 64 distinct lock names) held together, or none.

    The whole ``Lock`` surface, over every part: ``acquire``/``release``/``extend``,
    ``owned``, ``locked``, ``remaining``, ``lost``, ``check``, async twins, ``with`` /
    ``async with`` (released after the open database transaction, as a ``Lock``), the
    watchdog and ``max_hold`` per part, ``on_lost(multilock)`` once when any part is
    lost. ``fences``: name -> fence of its part. See docs/kinds.md.
    """

    def __init__(
        self,
        names: Iterable[str],
        *,
        ttl: float | None = None,
        timeout: float | None = None,
        blocking: bool = True,
        watchdog: bool | None = None,
        connection: str | None = None,
        fencing: bool = True,
        purpose: str | None = None,
        on_lost: Callable[[Any], Any] | None = None,
        max_hold: float | None = None,
        metrics_name: str | None = None,
    ) -> None:
        self.names = _validate_names(names)
        if on_lost is not None and not callable(on_lost):
            raise ValueError(f"on_lost must be callable, not {on_lost!r}")
        self.on_lost = on_lost
        self._lost_told = threading.Lock()
        self._told = False
        together = ", ".join(self.names)
        #: The parts, one plain ``Lock`` per name, in the order they are tried.
        self.parts: tuple[Lock, ...] = tuple(
            Lock(
                name,
                ttl=ttl,
                timeout=timeout,
                blocking=blocking,
                watchdog=watchdog,
                connection=connection,
                fencing=fencing,
                purpose=_part_purpose(purpose, index, len(self.names), together),
                on_lost=self._part_lost,
                max_hold=max_hold,
                metrics_name=metrics_name,
                reentrant=False,
            )
            for index, name in enumerate(sorted(self.names), 1)
        )
        first = self.parts[0]
        self.ttl, self.timeout, self.blocking = first.ttl, first.timeout, first.blocking
        self.watchdog, self.connection, self.purpose = first.watchdog, first.connection, purpose
        #: The names together, in messages ("Lock 'account:1 + account:2' was lost").
        self.name = " + ".join(self.names)
        self._held = False
        self._owner_pid: int | None = None
        #: The part that refused the last acquire (its name is in ``LockNotAcquired``).
        self.busy_part: Lock | None = None

    # -- state ---------------------------------------------------------------------------
    @property
    def fences(self) -> dict[str, int | None]:
        """Name -> fence of its part (``None`` when not held, or without fencing)."""
        return {part.name: part.fence for part in self.parts}

    @property
    def tokens(self) -> dict[str, str | None]:
        """Name -> token of its part (``None`` when not held)."""
        return {part.name: part.token for part in self.parts}

    @property
    def token(self) -> str | None:
        """The first part's token while held, else ``None`` (every part's: ``tokens``)."""
        return self.parts[0].token if self._held else None

    @property
    def lost(self) -> bool:
        """True once any part can no longer be trusted to be held (see ``Lock.lost``)."""
        return self._held and any(part.lost for part in self.parts)

    def _part_lost(self, part: Lock) -> None:
        with self._lost_told:  # parts' watchdogs may find them lost at once: tell once
            if self._told:
                return
            self._told = True
        if self.on_lost is not None:
            self.on_lost(self)

    def _resolve_wait(self, blocking: bool | None, timeout: float | None) -> float | None:
        return self.parts[0]._resolve_wait(blocking, timeout)

    # -- sync API -------------------------------------------------------------------------
    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Take every name, or none: True, or False when the timeout ran out."""
        return drivers.run(_acquire(self, blocking, timeout))

    def release(self) -> None:
        """Release every part, whatever happens to the others; then ``LockNotOwned`` if
        any was lost, or the error of those that failed (``LockBackendUnavailable``,
        naming each part; a part not released expires by its TTL, never renewed)."""
        drivers.run(_release(self))

    def extend(self, ttl: float | None = None) -> None:
        """Extend every part; ``LockNotOwned`` if any is no longer held."""
        drivers.run(_each(self, "extend", (ttl,)))

    def owned(self) -> bool:
        """True if this object holds every part right now (checked in Redis)."""
        return self._may_own() and all(part.owned() for part in self.parts)

    def locked(self) -> bool:
        """True if anyone holds any of the names."""
        return any(part.locked() for part in self.parts)

    def remaining(self) -> float | None:
        """Seconds until the first part expires, or ``None`` when not all are held."""
        left = [part.remaining() for part in self.parts] if self._may_own() else [None]
        return None if None in left else min(s for s in left if s is not None)

    def check(self) -> None:
        """``LockLost`` if any part was lost, ``LockNotOwned`` if not held (no network)."""
        if self.lost:
            raise LockLost(f"MultiLock {self.names!r} was lost.", lock_name=self.names[0])
        for part in self.parts:
            part.check()

    def __enter__(self) -> MultiLock:
        if not self.acquire():
            raise self._busy_error()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        drivers.run(protocol.exit_with(self, exc_type, defer_to_commit=True, releasing=_release))

    # -- async API ------------------------------------------------------------------------
    async def aacquire(self, blocking: bool | None = None, timeout: float | None = None) -> bool:
        """Async twin of :meth:`acquire`."""
        return await drivers.arun(_acquire(self, blocking, timeout))

    async def arelease(self) -> None:
        """Async twin of :meth:`release`."""
        await drivers.arun(_release(self))

    async def aextend(self, ttl: float | None = None) -> None:
        """Async twin of :meth:`extend`."""
        await drivers.arun(_each(self, "extend", (ttl,)))

    async def aowned(self) -> bool:
        """Async twin of :meth:`owned`."""
        return self._may_own() and all([await part.aowned() for part in self.parts])

    async def alocked(self) -> bool:
        """Async twin of :meth:`locked`."""
        return any([await part.alocked() for part in self.parts])

    async def __aenter__(self) -> MultiLock:
        if not await self.aacquire():
            raise self._busy_error()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await drivers.arun(
            protocol.exit_with(self, exc_type, defer_to_commit=False, releasing=_release)
        )

    # -- internals ------------------------------------------------------------------------
    def _may_own(self) -> bool:
        return self._held and self._owner_pid == os.getpid()

    def _release_after_transaction(self) -> None:
        if not self._held:
            return
        try:
            self.release()
        except LockNotOwned:
            release_logger.error("MultiLock %r was lost before the transaction ended", self.names)
        except RedisLockError:
            release_logger.exception("Releasing %r after the transaction failed", self.names)

    def _busy_error(self) -> LockNotAcquired:
        busy = self.busy_part or self.parts[0]
        refused = busy._busy_error()  # the busy name, its holder's TTL left
        return LockNotAcquired(
            f"MultiLock {list(self.names)!r}: {refused}",
            lock_name=busy.name,
            remaining=refused.remaining,
        )

    def __repr__(self) -> str:
        return f"<MultiLock {list(self.names)!r} {'held' if self._held else 'not held'}>"


def _part_purpose(purpose: str | None, index: int, count: int, together: str) -> str:
    text = f"{purpose or 'MultiLock'} (part {index} of {count}: {together})"
    return text if len(text) <= _PURPOSE_CHARS else text[: _PURPOSE_CHARS - 1] + "…"


# -- the lifecycle, written once for both drivers --------------------------------------------


def _acquire(
    multi: MultiLock, blocking: bool | None, timeout: float | None
) -> Generator[Step, Any, bool]:
    """Try every part without waiting; when one is busy, give back the others and wait for
    that one alone, then try the rest again. Never holds a subset while it waits."""
    wait_for = multi._resolve_wait(blocking, timeout)
    if multi._may_own():
        raise RedisLockError(
            f"MultiLock {list(multi.names)!r} is already acquired by this object; release "
            "it first.",
            lock_name=multi.names[0],
        )
    deadline = None if wait_for is None else clock() + wait_for
    multi.busy_part = None
    awaited: Lock | None = None  # the part to wait for before trying the others
    while True:
        held: list[Lock] = []
        try:
            if awaited is not None:
                left = None if deadline is None else max(0.0, deadline - clock())
                if not (yield Send(awaited, "acquire", (True, left))):
                    return False
                held.append(awaited)
            busy = None
            for part in multi.parts:
                if part is awaited:
                    continue
                if not (yield Send(part, "acquire", (False, None))):
                    busy = part
                    break
                held.append(part)
        except BaseException:
            yield from _give_back(held)
            raise
        if busy is None:
            multi._held, multi._owner_pid, multi._told = True, os.getpid(), False
            return True
        multi.busy_part = busy
        yield from _give_back(held)
        if deadline is not None and clock() >= deadline:
            return False
        awaited = busy


def _give_back(held: list[Lock]) -> Generator[Step, Any, None]:
    """Release what an attempt took (best effort: a part that fails expires by its TTL)."""
    for part in held:
        try:
            yield Send(part, "release", (), shielded=True)
        except Exception as exc:
            release_logger.warning("Could not give back %r (it expires): %s", part.name, exc)


def _release(multi: MultiLock) -> Generator[Step, Any, None]:
    if not multi._may_own():
        raise LockNotOwned(
            f"Cannot release MultiLock {list(multi.names)!r}: this object does not hold it.",
            lock_name=multi.names[0],
        )
    multi._held = False
    yield from _each(multi, "release", (), shielded=True)


def _each(
    multi: MultiLock, method: str, args: tuple[Any, ...], *, shielded: bool = False
) -> Generator[Step, Any, None]:
    """``method`` on every part, whatever happens to the others; then one error naming
    every part that failed (see :func:`_parts_failed`). A part whose release failed is
    already off the watchdog (``Lock.release`` forgets it first), so it expires by its TTL."""
    if method != "release" and not multi._may_own():
        raise LockNotOwned(
            f"Cannot {method} MultiLock {list(multi.names)!r}: this object does not hold it.",
            lock_name=multi.names[0],
        )
    failed: list[tuple[Lock, Exception]] = []
    cancelled: asyncio.CancelledError | None = None
    for part in multi.parts:
        try:
            yield Send(part, method, args, shielded=shielded)
        except asyncio.CancelledError as exc:
            # A cancel mid-release: the driver runs the rest to their end; it then goes on.
            if not shielded:
                raise
            cancelled = exc
        except Exception as exc:  # the other parts still get theirs
            failed.append((part, exc))
    if cancelled is not None:
        raise cancelled
    if failed:
        raise _parts_failed(multi, method, failed)


def _parts_failed(multi: MultiLock, method: str, failed: list[tuple[Lock, Exception]]) -> Exception:
    """One error for the parts ``method`` failed on: ``LockNotOwned`` when every one was
    gone; else the first other error's kind (``LockBackendUnavailable`` with every failed
    alias), naming each failed part and why, the first other error chained."""
    names = list(multi.names)
    gone = [part.name for part, exc in failed if isinstance(exc, LockNotOwned)]
    others = [(part, exc) for part, exc in failed if not isinstance(exc, LockNotOwned)]
    if not others:
        return LockNotOwned(
            f"Cannot {method} MultiLock {names!r}: {', '.join(gone)} expired or another "
            "holder took it.",
            lock_name=gone[0],
        )
    first_part, first = others[0]
    reasons = "; ".join(f"{part.name}: {exc}" for part, exc in failed)
    left = " (each expires by its TTL)" if method == "release" else ""
    message = (
        f"Could not {method} {len(failed)} of {len(multi.parts)} parts of MultiLock "
        f"{names!r}{left}: {reasons}"
    )
    error: Exception
    if isinstance(first, LockBackendUnavailable):
        aliases = dict.fromkeys(
            alias
            for _, exc in others
            if isinstance(exc, LockBackendUnavailable)
            for alias in exc.aliases
        )
        error = LockBackendUnavailable(message, lock_name=first_part.name, aliases=list(aliases))
    elif isinstance(first, RedisLockError):
        error = RedisLockError(message, lock_name=first_part.name)
    else:
        return first  # not ours to rename (a bug, a bad argument): as it was raised
    error.__cause__ = first
    return error


__all__ = ["MAX_NAMES", "MultiLock"]
