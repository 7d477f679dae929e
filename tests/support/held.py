"""What a held ``Lock``'s key holds (``scripts/held.lua``): its token, then its fence and
holder description; a key an older release wrote holds the bare token."""

from __future__ import annotations

from typing import Any


def held_at(client: Any, key: str) -> tuple[str, str, str] | None:
    """(token, fence, holder description) in ``key``; ``None`` when nobody holds it."""
    value = client.get(key)
    if value is None:
        return None
    token, _, rest = (value.decode() if isinstance(value, bytes) else value).partition("\x1e")
    fence, _, holder = rest.partition("\x1e")
    return token, fence, holder


def token_at(client: Any, key: str) -> str | None:
    """The token in ``key``; ``None`` when nobody holds it."""
    held = held_at(client, key)
    return None if held is None else held[0]
