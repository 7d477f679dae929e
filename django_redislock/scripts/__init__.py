"""The Lua scripts, loaded once and run by SHA (``EVALSHA``), falling back to
``EVAL`` when the server answers ``NOSCRIPT`` (restarted, or ``SCRIPT FLUSH``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from redis.exceptions import NoScriptError

from ..leases import ScriptOp, call
from ..wakeups import lua_prelude


class Script:
    """One Lua script of this package, run by SHA on any redis-py client."""

    __slots__ = ("name", "sha", "source")

    def __init__(self, name: str) -> None:
        self.name = name
        text = resources.files(__package__).joinpath(f"{name}.lua").read_text("utf-8")
        self.source = lua_prelude(text) + text
        self.sha = hashlib.sha1(self.source.encode("utf-8")).hexdigest()

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return client.evalsha(self.sha, len(keys), *keys, *args)
        except NoScriptError:
            # EVAL runs it and caches it, so the next EVALSHA finds it.
            return client.eval(self.source, len(keys), *keys, *args)

    async def acall(self, client: Any, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Async twin of :meth:`__call__` for ``redis.asyncio`` clients.

        Runs on a connection the library holds for the call, so a cancelled
        caller never leaves a half-read connection in the pool
        (:mod:`django_redislock.leases`).
        """
        return await call(client, ScriptOp(self, keys, args))

    def __repr__(self) -> str:
        return f"<Script {self.name} {self.sha[:8]}>"


ACQUIRE = Script("acquire")
RELEASE = Script("release")
EXTEND = Script("extend")
FORCE_RELEASE = Script("force_release")
FENCE_RAISE = Script("fence_raise")
FENCED_SET = Script("fenced_set")
UNCLAIM = Script("unclaim")
READ_HOLDER = Script("read_holder")
