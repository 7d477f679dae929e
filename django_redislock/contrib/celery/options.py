"""The ``lock={...}`` option of a :class:`~django_redislock.contrib.celery.LockedTask`.

Parsed and checked once per task class, so a typo fails when the task is defined (or at
the latest when Celery finalizes the app), naming the task and the key that is wrong.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...factory import check_lock_kwargs
from ...keys import MAX_NAME_LENGTH
from ...naming import CallNamer, checked_name

SCOPES = ("running", "queued")
#: What each scope can do when the key is busy (the first is the default).
ON_BUSY = {"running": ("skip", "retry", "error", "wait"), "queued": ("skip", "error", "wait")}
#: Our keys; anything else must be a keyword argument of ``Lock`` / ``Redlock``.
OWN_KEYS = frozenset(
    {
        "name",
        "key_args",
        "scope",
        "on_busy",
        "on_unavailable",
        "unavailable_countdown",
        "ttl",
        "timeout",
        "watchdog",
        "queued_ttl",
    }
)
#: What a run does when the lock server cannot be reached (the first is the default).
ON_UNAVAILABLE = ("error", "retry")
#: Seconds before a run retried by ``on_unavailable="retry"`` starts again.
DEFAULT_UNAVAILABLE_COUNTDOWN = 5.0
#: Keys the task decides itself.
RESERVED = frozenset({"blocking", "on_lost"})
#: Queued scope: how long a queued marker outlives a worker that died holding it.
DEFAULT_QUEUED_TTL = 3600.0


@dataclass(frozen=True)
class LockOptions:
    """One task's parsed ``lock`` option."""

    task_name: str
    namer: Callable[[tuple[Any, ...], dict[str, Any]], str]
    scope: str = "running"
    on_busy: str = "skip"
    on_unavailable: str = "error"
    unavailable_countdown: float = DEFAULT_UNAVAILABLE_COUNTDOWN
    ttl: float | None = None
    timeout: float | None = None
    watchdog: bool = True
    queued_ttl: float = DEFAULT_QUEUED_TTL
    lock_kwargs: Mapping[str, Any] = field(default_factory=dict)

    def lock_name(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The lock name for one call of the task."""
        return self.namer(args, kwargs)


def _fail(task_name: str, message: str) -> ValueError:
    return ValueError(f"lock={{...}} of task {task_name!r}: {message}")


def _number(task_name: str, key: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise _fail(task_name, f"{key!r} must be a number of seconds >= 0, not {value!r}")
    return float(value)


class ArgumentsNamer:
    """Names a call ``task.name:arg=value,...`` from all its arguments or the chosen ones.

    Readable when short and free of braces (the admin shows it); otherwise the task's name
    and a digest of the same text, so equal arguments always give the same name.
    """

    def __init__(self, task_name: str, run: Callable[..., Any], chosen: tuple[str, ...] | None):
        self.task_name = task_name
        self.chosen = chosen
        self.calls = CallNamer(task_name, run, where=f"task {task_name}")
        signature = self.calls.signature
        if chosen is not None and signature is not None:
            has_var_kw = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
            missing = [name for name in chosen if name not in signature.parameters]
            if missing and not has_var_kw:
                raise _fail(task_name, f"key_args names no parameter of the task: {missing}")

    def __call__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        values = self.calls.arguments(args, kwargs)
        names = sorted(values) if self.chosen is None else self.chosen
        text = ",".join(f"{name}={values.get(name)!r}" for name in names)
        name = f"{self.task_name}:{text}"
        if len(name) > MAX_NAME_LENGTH - 8 or "{" in name or "}" in name:
            digest = hashlib.sha256(text.encode()).hexdigest()[:32]
            name = f"{self.task_name[: MAX_NAME_LENGTH - 40]}#{digest}"
        return checked_name(name, self.chosen or "all arguments", f"task {self.task_name}")


def parse(task_name: str, run: Callable[..., Any], raw: Any) -> LockOptions:
    """Check ``raw`` (the task's ``lock`` attribute) and build its :class:`LockOptions`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise _fail(task_name, f"the lock option must be a dict, not {type(raw).__name__}")
    raw = dict(raw)
    reserved = sorted(RESERVED & set(raw))
    if reserved:
        raise _fail(task_name, f"{', '.join(reserved)} cannot be set: the task decides it")
    scope = raw.get("scope", "running")
    if scope not in SCOPES:
        raise _fail(task_name, f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    allowed = ON_BUSY[scope]
    on_busy = raw.get("on_busy", allowed[0])
    if on_busy not in allowed:
        raise _fail(
            task_name,
            f"on_busy must be one of {', '.join(allowed)} in the {scope} scope, not {on_busy!r}",
        )
    on_unavailable = raw.get("on_unavailable", ON_UNAVAILABLE[0])
    if on_unavailable not in ON_UNAVAILABLE:
        raise _fail(
            task_name,
            f"on_unavailable must be one of {', '.join(ON_UNAVAILABLE)}, not {on_unavailable!r}",
        )
    countdown = _number(
        task_name,
        "unavailable_countdown",
        raw.get("unavailable_countdown", DEFAULT_UNAVAILABLE_COUNTDOWN),
    )
    if not countdown:
        raise _fail(task_name, "'unavailable_countdown' must be > 0")
    timeout = _number(task_name, "timeout", raw.get("timeout"))
    if on_busy == "wait" and timeout is None:
        raise _fail(task_name, "on_busy='wait' needs a timeout (seconds to wait for the key)")
    ttl = _number(task_name, "ttl", raw.get("ttl"))
    if ttl == 0:
        raise _fail(task_name, "'ttl' must be > 0")
    queued_ttl = _number(task_name, "queued_ttl", raw.get("queued_ttl", DEFAULT_QUEUED_TTL))
    if not queued_ttl:
        raise _fail(task_name, "'queued_ttl' must be > 0")
    watchdog = raw.get("watchdog", True)
    if not isinstance(watchdog, bool):
        raise _fail(task_name, f"'watchdog' must be True or False, not {watchdog!r}")
    namer = _namer(task_name, run, raw)
    lock_kwargs = {key: value for key, value in raw.items() if key not in OWN_KEYS}
    try:
        check_lock_kwargs(lock_kwargs)
    except (TypeError, ValueError) as exc:
        raise _fail(task_name, str(exc)) from None
    if isinstance(namer, CallNamer):  # a template's locks share its family in metrics
        lock_kwargs = namer.lock_options(lock_kwargs)
    if scope == "queued" and (lock_kwargs.get("backend") == "redlock" or "connections" in raw):
        raise _fail(task_name, "the queued scope needs a Lock (one server), not a Redlock")
    return LockOptions(
        task_name=task_name,
        namer=namer,
        scope=scope,
        on_busy=on_busy,
        on_unavailable=on_unavailable,
        unavailable_countdown=countdown,
        ttl=ttl,
        timeout=timeout,
        watchdog=watchdog,
        queued_ttl=queued_ttl,
        lock_kwargs=lock_kwargs,
    )


def _namer(
    task_name: str, run: Callable[..., Any], raw: dict[str, Any]
) -> Callable[[tuple[Any, ...], dict[str, Any]], str]:
    """The lock name of one call: from ``name`` (a template or a callable) or ``key_args``."""
    name = raw.get("name", task_name)
    key_args = raw.get("key_args")
    if key_args is not None:
        if "name" in raw:
            raise _fail(task_name, "give either 'name' or 'key_args', not both")
        if key_args == "all":
            chosen = None
        elif isinstance(key_args, list | tuple) and all(isinstance(k, str) for k in key_args):
            chosen = tuple(key_args)
        else:
            raise _fail(task_name, f"key_args must be 'all' or a list of names, not {key_args!r}")
        return ArgumentsNamer(task_name, run, chosen)
    if callable(name) or isinstance(name, str):
        return CallNamer(name, run, where=f"task {task_name}")
    raise _fail(task_name, f"'name' must be a template str or a callable, not {name!r}")


__all__ = ["DEFAULT_QUEUED_TTL", "ON_BUSY", "SCOPES", "LockOptions", "parse"]
