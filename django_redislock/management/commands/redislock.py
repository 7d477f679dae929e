"""``manage.py redislock list|inspect|release|run|history|top``: look at held locks and
who waits for them, force-release one, run a command only while holding a lock
(:mod:`django_redislock.supervisor`), read the lock history (:mod:`.history`), or watch
it all live (:mod:`.top`).

Tokens are secrets that let anyone release a lock in its holder's name, so the
command never prints one whole: it shows a short prefix, enough to tell holders
apart, and ``release --token`` accepts that prefix.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_redislock.conf import get_config
from django_redislock.exceptions import RedisLockError
from django_redislock.inspection import (
    CHANGED_HANDS,
    RELEASED,
    LockHolder,
    LockInfo,
    LockWaiter,
    force_release_holder,
    held_locks,
    lock_info,
)
from django_redislock.supervisor import ON_BUSY, RunOptions, run_locked

#: Shortest ``--token`` prefix accepted (the listing shows this many characters).
MIN_TOKEN_PREFIX = 6


def token_prefix(token: str) -> str:
    return token[:MIN_TOKEN_PREFIX]


def holder_dict(holder: LockHolder) -> dict[str, Any]:
    """A JSON-ready description of one holder, without its full token."""
    return {
        "owner": {"host": holder.host, "pid": holder.pid, "thread": holder.thread},
        "purpose": holder.purpose,
        "ttl": None if holder.ttl is None else round(holder.ttl, 3),
        "acquired_at": holder.acquired_at.isoformat() if holder.acquired_at else None,
        "fence": holder.fence,
        "watchdog": holder.watchdog,
        "token_prefix": token_prefix(holder.token),
    }


def waiter_dict(waiter: LockWaiter) -> dict[str, Any]:
    """A JSON-ready description of one waiter."""
    return {
        "owner": {"host": waiter.host, "pid": waiter.pid, "thread": waiter.thread},
        "purpose": waiter.purpose,
        "kind": waiter.kind,
        "waiting_since": waiter.waiting_since.isoformat(),
        "token_prefix": waiter.short_token.rstrip("…"),
    }


def info_dict(info: LockInfo) -> dict[str, Any]:
    """A JSON-ready description of a held lock (its first holder's fields at the top, as
    before kinds had several), without any full token."""
    return {
        "name": info.name,
        "kind": info.kind,
        "term": info.term,
        "key": info.key,
        "ttl": None if info.ttl is None else round(info.ttl, 3),
        "owner": {"host": info.owner.host, "pid": info.owner.pid, "thread": info.owner.thread},
        "purpose": info.purpose,
        "acquired_at": info.acquired_at.isoformat() if info.acquired_at else None,
        "fence": info.fence,
        "watchdog": info.watchdog,
        "connection": info.connection,
        "token_prefix": token_prefix(info.token),
        "limit": info.limit,
        "holders": [holder_dict(holder) for holder in info.holders],
        "waiting": info.waiting,
        "waiters": [waiter_dict(waiter) for waiter in info.waiters],
    }


def _ttl(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


class Command(BaseCommand):
    help = "List, inspect and force-release the distributed locks held in Redis."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(
            dest="subcommand", required=True, metavar="{list,inspect,release,run,history,top}"
        )
        listing = sub.add_parser("list", help="List held locks (SCAN, never KEYS).")
        listing.add_argument(
            "--pattern",
            default="*",
            help="Glob over lock names, e.g. 'report:*' (default: every lock).",
        )
        listing.add_argument("--json", action="store_true", help="Print a JSON array.")
        inspect = sub.add_parser("inspect", help="Show who holds one lock.")
        inspect.add_argument("name")
        inspect.add_argument("--json", action="store_true", help="Print a JSON object.")
        release = sub.add_parser("release", help="Force-release one lock.")
        release.add_argument("name")
        release.add_argument(
            "--yes", action="store_true", help="Do not ask for confirmation (needed off a TTY)."
        )
        release.add_argument(
            "--token",
            default=None,
            help=(
                "Release only if the holder's token is this (or starts with this, at least "
                f"{MIN_TOKEN_PREFIX} characters, as `list` shows it). Write --token=VALUE: "
                "a token may start with '-'."
            ),
        )
        run = sub.add_parser(
            "run",
            help="Run COMMAND only while holding lock NAME (exit 75 busy, 76 lost).",
            usage="manage.py redislock run NAME [options] -- COMMAND [ARG ...]",
        )
        _add_run_arguments(run)
        history = sub.add_parser(
            "history", help="Show the recorded events of one lock, or of every lock."
        )
        history.add_argument("name", nargs="?", default=None)
        history.add_argument(
            "--since", default=None, help="Only events since then: 90s, 15m, 1h, 2d, or ISO."
        )
        history.add_argument(
            "--limit", type=int, default=100, help="At most this many events (default 100)."
        )
        history.add_argument("--json", action="store_true", help="Print a JSON array.")
        top = sub.add_parser(
            "top", help="Watch held locks, waiters, hot families and events, live (q quits)."
        )
        top.add_argument("--once", action="store_true", help="Print one snapshot and exit.")
        top.add_argument("--json", action="store_true", help="Print one snapshot as JSON.")
        top.add_argument(
            "--interval", type=float, default=1.0, help="Seconds between redraws (default 1)."
        )
        for subparser in (listing, inspect, release, run, history, top):
            subparser.add_argument(
                "--connection",
                default=None,
                help="django-redis cache alias (default: REDISLOCK['CONNECTION']).",
            )

    def run_from_argv(self, argv: list[str]) -> None:
        self._run_tail: list[str] | None = None
        if argv[2:3] == ["run"] and "--" in argv:
            split = argv.index("--")
            argv, self._run_tail = argv[:split], argv[split + 1 :]
        super().run_from_argv(argv)

    def handle(self, *args: Any, **options: Any) -> None:
        handler = getattr(self, f"handle_{options['subcommand']}")
        try:
            handler(**options)
        except RedisLockError as exc:
            raise CommandError(str(exc)) from exc
        except ValueError as exc:  # a bad pattern or name
            raise CommandError(str(exc)) from exc

    # -- list --------------------------------------------------------------------

    def handle_list(self, *, pattern: str, json: bool, connection: str | None, **_: Any) -> None:
        infos = sorted(held_locks(pattern, connection=connection), key=lambda i: i.name)
        if json:
            self._json([info_dict(info) for info in infos])
            return
        if not infos:
            self.stdout.write("No locks are held." if pattern == "*" else "No held lock matches.")
            return
        # One row per holder: a semaphore's permits each on a line of their own.
        rows = [
            (
                info.name,
                info.kind,
                info.holders_text,
                _ttl(holder.ttl),
                str(holder.owner),
                "-" if holder.fence is None else str(holder.fence),
                "yes" if holder.watchdog else "no",
                token_prefix(holder.token),
                holder.purpose or "-",
            )
            for info in infos
            for holder in info.holders
        ]
        header = (
            "NAME", "KIND", "HOLDERS", "TTL", "OWNER", "FENCE", "WATCHDOG", "TOKEN", "PURPOSE"
        )  # fmt: skip
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
        for row in [header, *rows]:
            cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
            self.stdout.write("  ".join([*cells, row[-1]]).rstrip())
        alias = connection or get_config()["CONNECTION"]
        count = len(infos)
        self.stdout.write(f"{count} held lock{'' if count == 1 else 's'} on {alias!r}.")

    # -- inspect -------------------------------------------------------------------

    def handle_inspect(self, *, name: str, json: bool, connection: str | None, **_: Any) -> None:
        info = lock_info(name, connection=connection)
        if info is None:
            raise CommandError(f"Lock {name!r} is not held.")
        if json:
            self._json(info_dict(info))
            return
        self._describe(info)

    def _describe(self, info: LockInfo, holders: list[LockHolder] | None = None) -> None:
        """The lock, then each holder (``holders``: only those, default all)."""
        lines = [
            ("Name", info.name),
            ("Kind", info.kind_text),
            ("Key", info.key),
            ("Connection", info.connection),
            ("Holders", info.holders_text),
        ]
        for number, holder in enumerate(info.holders, 1):
            if holders is not None and holder not in holders:
                continue
            if len(info.holders) > 1:
                lines.append(("", ""))
                lines.append((f"Holder {number}", ""))
            lines += [
                ("Owner", str(holder.owner)),
                ("Purpose", holder.purpose or "-"),
                ("TTL left", _ttl(holder.ttl)),
                ("Acquired at", holder.acquired_at.isoformat() if holder.acquired_at else "-"),
                ("Fence", "-" if holder.fence is None else str(holder.fence)),
                ("Watchdog", "yes" if holder.watchdog else "no"),
                ("Token", token_prefix(holder.token) + "…"),
            ]
        if holders is None:
            lines += [("", ""), ("Waiting", str(info.waiting))]
            for waiter in info.waiters:
                since = waiter.waiting_since.isoformat(timespec="seconds")
                purpose = f" ({waiter.purpose})" if waiter.purpose else ""
                lines.append(("", f"{waiter.owner}{purpose}, {waiter.kind}, since {since}"))
        for label, value in lines:
            head = f"{label}:" if label else ""
            self.stdout.write(f"{head:<13}{value}".rstrip())

    # -- release -------------------------------------------------------------------

    def handle_release(
        self, *, name: str, yes: bool, token: str | None, connection: str | None, **_: Any
    ) -> None:
        if token is not None and len(token) < MIN_TOKEN_PREFIX:
            raise CommandError(f"--token needs at least {MIN_TOKEN_PREFIX} characters.")
        info = lock_info(name, connection=connection)
        if info is None:
            raise CommandError(f"Lock {name!r} is not held; nothing to release.")
        targets = [h for h in info.holders if token is None or h.token.startswith(token)]
        if not targets:
            shown = ", ".join(f"token {token_prefix(h.token)}…, {h.owner}" for h in info.holders)
            raise CommandError(f"Lock {name!r} is held by another holder ({shown}); not released.")
        if len(targets) > 1 and token is not None:
            raise CommandError(
                f"--token {token} matches {len(targets)} holders of lock {name!r}; give more "
                "of the token."
            )
        if not yes:
            self._confirm(info, targets)
        # Release exactly the holders shown: one that changed hands since is left alone.
        released = []
        for holder in targets:
            result = force_release_holder(name, token=holder.token, connection=connection)
            if result.status == RELEASED:
                released.append(holder)
            elif len(targets) == 1 and result.status == CHANGED_HANDS:
                now = f" (now {result.info.owner})" if result.info else ""
                raise CommandError(f"Lock {name!r} changed hands{now}; not released.")
        if not released:
            raise CommandError(f"Lock {name!r} was released or expired meanwhile.")
        for holder in released:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Released lock {name!r} (was held by {holder.owner}, fence "
                    f"{'-' if holder.fence is None else holder.fence})."
                )
            )
        if len(released) < len(targets):
            gone = len(targets) - len(released)
            self.stdout.write(f"{gone} of its holders had released it or expired meanwhile.")

    def handle_run(
        self,
        *,
        name: str,
        command: list[str],
        ttl: float | None,
        on_busy: str,
        lock_timeout: float | None,
        grace: float,
        connection: str | None,
        **_: Any,
    ) -> None:
        command = getattr(self, "_run_tail", None) or command
        options = RunOptions(name, command, ttl, on_busy, lock_timeout, grace, connection)
        status = run_locked(
            options,
            say=lambda text: self.stdout.write(text),
            warn=lambda text: self.stderr.write(text),
        )
        if status:
            self.stdout.flush()
            raise SystemExit(status)

    def _confirm(self, info: LockInfo, holders: list[LockHolder]) -> None:
        if not sys.stdin.isatty():
            raise CommandError(
                "Not on a terminal: pass --yes to force-release without confirmation."
            )
        self._describe(info, holders)
        whom = "Its holder" if len(holders) == 1 else f"Its {len(holders)} holders"
        answer = input(f"Force-release lock {info.name!r}? {whom} may still be working. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("Cancelled; nothing was released.")

    # -- history -------------------------------------------------------------------

    def handle_history(
        self,
        *,
        name: str | None,
        since: str | None,
        limit: int,
        json: bool,
        connection: str | None,
        **_: Any,
    ) -> None:
        from django_redislock.history import lock_history, parse_since

        if limit < 1:
            raise CommandError(f"--limit must be at least 1, not {limit}")
        start = None if since is None else parse_since(since)
        found = lock_history(name, connection=connection, since=start, limit=limit)
        if json:
            self._json([event.as_dict() for event in found])
            return
        if not found:
            off = "" if get_config()["HISTORY"] else " (REDISLOCK['HISTORY'] is off)"
            self.stdout.write(f"No recorded events{off}.")
            return
        for event in found:
            parts = [event.at.isoformat(timespec="milliseconds"), f"{event.event:<14}", event.name]
            if event.fence is not None:
                parts.append(f"fence {event.fence}")
            if event.waited is not None:
                parts.append(f"waited {event.waited:.3f}s")
            if event.held is not None:
                parts.append(f"held {event.held:.3f}s")
            if event.holder:
                parts.append(f"holder {event.holder}")
            if event.reason:
                parts.append(event.reason)
            self.stdout.write("  ".join(parts))

    # -- top -----------------------------------------------------------------------

    def handle_top(
        self, *, once: bool, json: bool, interval: float, connection: str | None, **_: Any
    ) -> None:
        from django_redislock import top

        if not interval > 0:
            raise CommandError(f"--interval must be a number of seconds > 0, not {interval}")
        if json:
            self._json(top.as_dict(top.snapshot(connection)))
            return
        if once:
            self.stdout.write(top.as_text(top.snapshot(connection)))
            return
        try:
            from django_redislock import top_view
        except ImportError as exc:  # pragma: no cover - rich is in the dev extra
            raise CommandError(
                f"The live view needs rich ({exc}): pip install 'django-redislock[top]', "
                "or use --once / --json."
            ) from exc
        top_view.live(lambda: top.snapshot(connection), interval)

    def _json(self, data: Any) -> None:
        self.stdout.write(json.dumps(data, indent=2, ensure_ascii=False))


def _add_run_arguments(run: CommandParser) -> None:
    run.add_argument("name")
    run.add_argument("--ttl", type=float, default=None, help="Lock TTL in seconds.")
    run.add_argument(
        "--on-busy",
        choices=ON_BUSY,
        default="error",
        help="error: exit 75 naming the holder (default); skip: exit 0; "
        "wait: up to --lock-timeout, then exit 75.",
    )
    run.add_argument(
        "--lock-timeout",
        type=float,
        default=None,
        help="Seconds to wait with --on-busy wait (default: as long as it takes).",
    )
    run.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="Seconds between SIGTERM and SIGKILL when the lock is lost, and for what "
        "the command leaves running in its process group (default 10).",
    )
    # Filled by run_from_argv from what follows "--" (argparse cannot do it: a
    # positional after NAME would swallow the options, or be matched empty at NAME).
    run.add_argument("command", nargs="*", help=argparse.SUPPRESS)
