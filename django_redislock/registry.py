"""The registry of lock kinds and the transports each runs over.

A kind (the mutex today; the semaphore, the read-write lock's two sides) is known by
its name: its key layout, its operations, and the lock class that runs it over
each backend ("redis": one server, or one server and ``WAIT`` for replicas;
"redlock": a majority of independent servers). :mod:`~django_redislock.factory`
(decorators, commands, Celery) and :mod:`~django_redislock.inspection` (the admin,
``redislock list``) look kinds up here instead of naming classes. Lock classes are
named by dotted path and imported when first asked for, so Redlock's machinery is
imported only by those who use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from .conf import get_config
from .exceptions import LockConfigurationError
from .keys import LockKeys, validate_name, validate_prefix
from .kinds.mutex import Mutex
from .kinds.rwlock import Read, Write
from .kinds.semaphore import Semaphore

if TYPE_CHECKING:
    from .lock import BaseLock

#: The transports a kind may run over, by the name ``backend=`` takes.
BACKENDS: dict[str, str] = {
    "redis": "one server (a cache alias), or one server and WAIT for its replicas",
    "redlock": "a majority of independent servers (Redlock)",
}


@dataclass(frozen=True)
class Kind:
    """One kind of lock, as the rest of the package sees it."""

    #: Its name in inspection (``LockInfo.kind``) and here.
    name: str
    #: Its operations on one lock's keys (what inspection sends: read_holder, force_release).
    operations: Callable[[LockKeys], Any]
    #: The lock class per backend (dotted paths); the first is the default.
    classes: Mapping[str, str] = field(default_factory=dict)
    #: The Redis type of its main key ``P:{N}``: ``TYPE`` tells which kind holds a name.
    #: Give a new kind a type of its own; kinds sharing one are read as the first
    #: registered of them.
    redis_type: str = "string"
    #: What people call it, in messages (default: its name).
    title: str = ""

    @property
    def label(self) -> str:
        return self.title or self.name

    def keys(self, name: str) -> LockKeys:
        """The Redis names of lock ``name`` under the configured prefix."""
        return LockKeys.build(validate_prefix(get_config()["KEY_PREFIX"]), validate_name(name))

    @property
    def backends(self) -> tuple[str, ...]:
        return tuple(self.classes)

    def lock_class(self, backend: str | None = None) -> type[BaseLock]:
        """The class running this kind over ``backend`` (default: the first)."""
        if backend is None:
            backend = self.backends[0]
        if backend not in self.classes:
            raise ValueError(
                f"backend must be one of {', '.join(self.backends)} for a {self.name}, "
                f"not {backend!r}"
            )
        return _import(self.classes[backend])


_kinds: dict[str, Kind] = {}


def register(kind: Kind) -> Kind:
    """Make ``kind`` known by its name (a later registration of the name replaces it)."""
    unknown = sorted(set(kind.classes) - set(BACKENDS))
    if unknown:
        raise ValueError(f"Unknown backend(s) {unknown} for kind {kind.name!r}")
    _kinds[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget kind ``name`` (a kind defined for a test goes when the test ends)."""
    _kinds.pop(name, None)


def kind_of_type(redis_type: str) -> Kind | None:
    """The (first registered) kind whose main key has Redis type ``redis_type``, if any."""
    for candidate in _kinds.values():
        if candidate.redis_type == redis_type:
            return candidate
    return None


def kind(name: str = "lock") -> Kind:
    """The registered kind called ``name``."""
    try:
        return _kinds[name]
    except KeyError:
        known = ", ".join(sorted(_kinds))
        raise ValueError(f"Unknown lock kind {name!r}; known kinds: {known}") from None


def kinds() -> list[Kind]:
    """Every registered kind, in registration order."""
    return list(_kinds.values())


def conflict(name: str, wanted: str, found_type: str | None) -> LockConfigurationError:
    """The error for lock ``name`` asked for as kind ``wanted`` while Redis holds it as
    another kind (its main key of Redis type ``found_type``; ``None``: unknown)."""
    other = kind_of_type(found_type) if found_type else None
    if other is not None:
        held = f"a {other.label}"
    elif found_type and found_type != "none":
        held = f"something else (its key {{{name}}} is a Redis {found_type})"
    else:
        held = "another kind of lock"
    asked = _kinds[wanted].label if wanted in _kinds else wanted
    return LockConfigurationError(
        f"Lock name {name!r} is in use by {held}; it was asked for as a {asked}. "
        "Each kind of lock needs names of its own.",
        lock_name=name,
    )


def _import(path: str) -> Any:
    # Not cached: a test (or a project) may replace the class on its module.
    return import_string(path)


register(
    Kind(
        "lock",
        operations=Mutex,
        classes={
            "redis": "django_redislock.lock.Lock",
            "redlock": "django_redislock.redlock.Redlock",
        },
    )
)
register(
    Kind(
        "semaphore",
        operations=Semaphore,
        classes={"redis": "django_redislock.semaphore.Semaphore"},
        redis_type="zset",
    )
)

# An election's lease is a mutex whose holder description says "election": inspection
# shows it so, and force_release finds its operations here.
register(
    Kind(
        "election",
        operations=Mutex,
        classes={"redis": "django_redislock.election.LeaderLease"},
    )
)

for _side in ("read", "write"):
    register(
        Kind(
            _side,
            operations=Read if _side == "read" else Write,
            classes={"redis": f"django_redislock.rwlock.{_side.capitalize()}Lock"},
            redis_type="set",
            title="read-write lock",
        )
    )

__all__ = [
    "BACKENDS",
    "Kind",
    "conflict",
    "kind",
    "kind_of_type",
    "kinds",
    "register",
    "unregister",
]
