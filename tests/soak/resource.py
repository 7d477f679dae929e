"""The soak's protected resource: one fenced counter per lock name (``resource.lua`` and
``resource_read.lua`` of the fault suite) on a server no fault touches, its reads fenced
too (:class:`~tests.faults.harness.FencedReadResource`)."""

from __future__ import annotations

from tests.faults.harness import FencedReadResource


class NamedResource(FencedReadResource):
    """A :class:`FencedReadResource` whose keys belong to one lock name."""

    def __init__(self, url: str, name: str, *, enforce: bool = True) -> None:
        super().__init__(url, enforce=enforce, prefix=f"soak:resource:{name}")
