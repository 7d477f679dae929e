"""Management commands that hold a lock: :class:`LockedCommand` and the code that
:func:`~django_redislock.decorators.lock_command` shares with it."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from .exceptions import LockBackendUnavailable, LockNotAcquired
from .factory import holder_info, make_lock
from .keys import validate_seconds
from .naming import NameTemplate, checked_name

if TYPE_CHECKING:
    from .inspection import LockInfo
    from .lock import BaseLock

R = TypeVar("R")

logger = logging.getLogger("django_redislock.commands")

#: What a command does when the lock is held by someone else.
ON_BUSY = ("error", "skip", "wait")
#: The exit status of a command whose lock server cannot be reached (sysexits.h
#: EX_UNAVAILABLE): distinct from a busy lock's 1, so a scheduler can tell them apart.
EX_UNAVAILABLE = 69


def validate_on_busy(on_busy: object) -> str:
    """Return ``on_busy`` if it is one of :data:`ON_BUSY`, else raise ``ValueError``."""
    if on_busy not in ON_BUSY:
        raise ValueError(
            f"on_busy must be one of {', '.join(repr(v) for v in ON_BUSY)}, not {on_busy!r}"
        )
    return str(on_busy)


def command_name(command: BaseCommand) -> str:
    """The name ``manage.py`` knows the command by (its module's last part)."""
    return type(command).__module__.rpartition(".")[2]


def describe_holder(name: str, info: LockInfo | None) -> str:
    """One line saying who holds lock ``name`` and for how long."""
    if info is None:
        return f"Lock {name!r} was busy, and has been released since; run the command again."
    owner = info.owner
    who = f"host {owner.host or '?'}, pid {owner.pid if owner.pid is not None else '?'}"
    if owner.thread:
        who += f", thread {owner.thread}"
    purpose = f" for {info.purpose!r}" if info.purpose else ""
    left = "an unknown time" if info.ttl is None else f"{info.ttl:.1f} more seconds"
    watchdog = " (renewed by a watchdog)" if info.watchdog else ""
    return f"Lock {name!r} is held by {who}{purpose}, for {left}{watchdog}."


def describe_unavailable(name: str, error: LockBackendUnavailable) -> str:
    """One line naming the lock, the connection(s) that failed and the error."""
    aliases = ", ".join(repr(alias) for alias in error.aliases) or "?"
    where = "connection" if len(error.aliases) <= 1 else "connections"
    cause = error.__cause__
    detail = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
    detail = " ".join(detail.split())  # one line, whatever the server's message holds
    return f"Lock {name!r} unavailable: cannot reach {where} {aliases} ({detail})"


def run_locked(
    command: BaseCommand,
    call: Callable[[], R],
    *,
    name: str | None,
    on_busy: str,
    lock_kwargs: Mapping[str, Any],
) -> R | None:
    """Run ``call()`` holding lock ``name`` (default: the command's name); apply ``on_busy``."""
    cmd = command_name(command)
    kwargs = {"purpose": f"manage.py {cmd}", **lock_kwargs}
    if on_busy != "wait":
        kwargs.setdefault("timeout", 0)
    lock: BaseLock = make_lock(cmd if name is None else name, **kwargs)
    entered = done = False
    result: R | None = None
    try:
        with lock:
            entered = True
            result = call()
            done = True
        return result
    except LockNotAcquired:
        if entered:
            raise
    except LockBackendUnavailable as error:
        if done:  # the work is done; the lock expires within its TTL
            logger.warning("manage.py %s: lock %r not released: %s", cmd, lock.name, error)
            command.stderr.write(
                f"Warning: {describe_unavailable(lock.name, error)} (not released; it "
                "expires within its TTL)",
                style_func=command.style.WARNING,
            )
            return result
        if entered:  # raised by the command itself: not ours to hide
            raise
        message = describe_unavailable(lock.name, error)
        logger.info("manage.py %s not run: %s", cmd, message)  # the CommandError says it
        # CommandError: manage.py prints it as one line (no traceback) and exits with it.
        raise CommandError(message, returncode=EX_UNAVAILABLE) from error
    message = describe_holder(lock.name, holder_info(lock))
    if on_busy == "skip":
        logger.info("manage.py %s skipped: %s", cmd, message)
        command.stderr.write(f"Skipped: {message}", style_func=command.style.WARNING)
        return None
    raise CommandError(message)


def _seconds(value: str) -> float:
    try:
        return validate_seconds(float(value), "--lock-timeout", allow_zero=True)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _locking_handle(handle: Callable[..., Any]) -> Callable[..., Any]:
    def locking_handle(self: LockedCommand, *args: Any, **options: Any) -> Any:
        if options.get("no_lock") or getattr(self, "_redislock_holding", False):
            return handle(self, *args, **options)  # --no-lock, or super().handle()

        def call() -> Any:
            self._redislock_holding = True
            try:
                return handle(self, *args, **options)
            finally:
                self._redislock_holding = False

        return run_locked(
            self,
            call,
            name=self.get_lock_name(options),
            on_busy=self.lock_on_busy,
            lock_kwargs=self.get_lock_kwargs(options),
        )

    locking_handle.__wrapped__ = handle  # type: ignore[attr-defined]
    locking_handle.__name__ = handle.__name__
    locking_handle.__qualname__ = handle.__qualname__
    locking_handle.__doc__ = handle.__doc__
    locking_handle._redislock = True  # type: ignore[attr-defined]
    return locking_handle


class LockedCommand(BaseCommand):
    """A ``BaseCommand`` whose ``handle`` runs while holding a lock.

    Set the class attributes; the command gets ``--lock-timeout SECONDS`` (wait that long
    for the lock, overriding ``lock_timeout``) and ``--no-lock`` (run without the lock).
    """

    #: Lock name; a ``str.format`` template over the options (``"import:{source}"``).
    #: ``None``: the command's name. Override :meth:`get_lock_name` for anything else.
    lock_name: str | None = None
    #: Seconds the lock lives unless renewed (``None``: ``REDISLOCK["TTL"]``).
    lock_ttl: float | None = None
    #: "error", "skip" or "wait" (see :func:`~django_redislock.lock_command`).
    lock_on_busy: str = "error"
    #: Keep the lock alive while the command runs (long commands outlive any TTL).
    lock_watchdog: bool = True
    #: Seconds to wait for the lock (``None``: 0 for "error"/"skip", for ever for "wait").
    lock_timeout: float | None = None
    #: Any other ``Lock`` / ``Redlock`` keyword arguments (``connection``, ``max_hold``...).
    lock_options: Mapping[str, Any] = {}
    # True while this instance's handle runs under the lock (so super().handle() does not
    # take it again).
    _redislock_holding = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        validate_on_busy(cls.lock_on_busy)
        if cls.lock_name is not None:
            NameTemplate(cls.lock_name, where=f"{cls.__module__}.{cls.__qualname__}")
        handle = cls.__dict__.get("handle")
        if handle is not None and not getattr(handle, "_redislock", False):
            cls.handle = _locking_handle(handle)  # type: ignore[method-assign]

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """Django's parser plus ``--lock-timeout`` and ``--no-lock``."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        group = parser.add_argument_group("lock")
        group.add_argument(
            "--lock-timeout",
            type=_seconds,
            metavar="SECONDS",
            default=None,
            help="Wait up to SECONDS for the lock before giving up.",
        )
        group.add_argument(
            "--no-lock",
            action="store_true",
            help="Run without taking the lock (you make sure nothing else runs).",
        )
        return parser

    def get_lock_name(self, options: Mapping[str, Any]) -> str:
        """The lock name for this run: :attr:`lock_name` filled from the options."""
        if self.lock_name is None:
            return command_name(self)
        where = f"{type(self).__module__}.{type(self).__qualname__}"
        template = NameTemplate(self.lock_name, where=where)
        return checked_name(template.render(options), self.lock_name, where)

    def get_lock_kwargs(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Keyword arguments for the lock, from the ``lock_*`` attributes and the options."""
        kwargs: dict[str, Any] = {"watchdog": self.lock_watchdog, **self.lock_options}
        if self.lock_ttl is not None:
            kwargs["ttl"] = self.lock_ttl
        timeout = options.get("lock_timeout")
        if timeout is None:
            timeout = self.lock_timeout
        if timeout is not None:
            kwargs["timeout"] = timeout
        return kwargs


__all__ = [
    "EX_UNAVAILABLE",
    "ON_BUSY",
    "LockedCommand",
    "command_name",
    "describe_holder",
    "describe_unavailable",
    "run_locked",
]
