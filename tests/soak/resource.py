"""The soak's protected resource: one fenced counter per lock name (``resource.lua`` of
the fault suite) on a server no fault touches."""

from __future__ import annotations

from tests.faults.harness import RedisResource


class NamedResource(RedisResource):
    """A :class:`RedisResource` whose keys belong to one lock name."""

    def __init__(self, url: str, name: str, *, enforce: bool = True) -> None:
        super().__init__(url, enforce=enforce)
        prefix = f"soak:resource:{name}"
        self.keys = [f"{prefix}:counter", f"{prefix}:fence", f"{prefix}:log"]
