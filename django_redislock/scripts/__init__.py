"""The Lua scripts: source and SHA. They are sent by
:mod:`django_redislock.transports.wire` (``EVALSHA``, ``EVAL`` after ``NOSCRIPT``)."""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from ..wakeups import lua_prelude


class Script:
    """One Lua script (the ``WAKE_*`` names prepended to its source): this package's
    ``<name>.lua``, or ``source`` for a kind defined elsewhere."""

    __slots__ = ("name", "sha", "source")

    def __init__(self, name: str, source: str | None = None) -> None:
        self.name = name
        text = (
            resources.files(__package__).joinpath(f"{name}.lua").read_text("utf-8")
            if source is None
            else source
        )
        self.source = lua_prelude(text) + _libraries(text) + text
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    def __repr__(self) -> str:
        return f"<Script {self.name} {self.sha[:8]}>"


#: Lua helper libraries, by the prefix of the functions they define.
_LIBRARIES = ("held", "line", "waiting")


def _libraries(source: str) -> str:
    """The Lua helpers ``source`` calls (``line_*``: ``line.lua``, ``held_*``:
    ``held.lua``, ``waiting_*``: ``waiting.lua``), to prepend to it."""
    return "".join(
        resources.files(__package__).joinpath(f"{name}.lua").read_text("utf-8")
        for name in _LIBRARIES
        if re.search(rf"\b{name}_\w+\(", source)
    )


ACQUIRE = Script("acquire")
RELEASE = Script("release")
EXTEND = Script("extend")
FORCE_RELEASE = Script("force_release")
FENCE_RAISE = Script("fence_raise")
FENCED_SET = Script("fenced_set")
UNCLAIM = Script("unclaim")
READ_HOLDER = Script("read_holder")
KEY_TYPE = Script("key_type")
SEMAPHORE_ACQUIRE = Script("semaphore_acquire")
SEMAPHORE_RELEASE = Script("semaphore_release")
SEMAPHORE_EXTEND = Script("semaphore_extend")
SEMAPHORE_UNCLAIM = Script("semaphore_unclaim")
SEMAPHORE_READ = Script("semaphore_read")
SEMAPHORE_FORCE_RELEASE = Script("semaphore_force_release")
RWLOCK_ACQUIRE = Script("rwlock_acquire")
RWLOCK_RELEASE = Script("rwlock_release")
RWLOCK_FORCE_RELEASE = Script("rwlock_force_release")
MUTEX_WAITERS = Script("mutex_waiters")
QUEUED_WAITERS = Script("queued_waiters")
HISTORY_APPEND = Script("history_append")
