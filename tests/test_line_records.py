"""``scripts/line.lua`` record by record: a place is found by its token with a string
search, renewed where it stands, left without breaking the separators around it, and
passed over (and dropped) by a pop once past its deadline; a long line is tidied of
dead places when a place is put."""

from __future__ import annotations

from typing import Any

import pytest

from django_redislock.scripts import Script
from django_redislock.transports import wire

KEY = "redislock:{records}:line"

#: Runs one line function on KEY at the server's clock plus ARGV[1] ms.
PROBE = Script(
    "line_probe",
    source="""
local now_ms = line_clock() + tonumber(ARGV[1])
if ARGV[2] == 'place' then
  line_place(KEYS[1], now_ms, ARGV[3], ARGV[3] .. ':1:5000:1:holder', ARGV[4], ARGV[5] == '1')
  return 1
elseif ARGV[2] == 'leave' then
  return line_leave(KEYS[1], now_ms, ARGV[3]) and 1 or 0
end
local claim, left = line_pop(KEYS[1], now_ms)
return claim and {claim, left} or false
""",
)


def _run(client: Any, *args: Any) -> Any:
    return wire.run(client, wire.Call(PROBE, (KEY,), args))


def place(client: Any, token: str, ttl_ms: int = 5000, first: bool = False, at: int = 0) -> None:
    _run(client, at, "place", token, ttl_ms, "1" if first else "0")


def leave(client: Any, token: str, at: int = 0) -> bool:
    return bool(_run(client, at, "leave", token))


def pop(client: Any, at: int = 0) -> str | None:
    reply = _run(client, at, "pop")
    return reply[0].decode().split(":")[0] if reply else None


def tokens(client: Any) -> list[str]:
    line = client.get(KEY)
    return [] if line is None else [r.split(":")[1] for r in line.decode().split("\x1e")]


@pytest.fixture
def client(lock_backend: Any) -> Any:
    client = lock_backend.client()
    client.delete(KEY)
    return client


def test_places_keep_their_order_when_renewed(client: Any) -> None:
    for token in ("a", "b", "c"):
        place(client, token)
    place(client, "b", ttl_ms=9000)  # renewed where it stands
    assert tokens(client) == ["a", "b", "c"]
    assert 5000 < client.pttl(KEY) <= 9000  # the key lives as long as its last place
    place(client, "z", first=True)
    assert tokens(client) == ["z", "a", "b", "c"]


def test_a_token_is_found_only_as_a_token(client: Any) -> None:
    # '-' and '%' are pattern characters in Lua; 'a' is also a prefix of 'a-b'.
    for token in ("a-b", "a", "x%y", "ab"):
        place(client, token)
    place(client, "a")
    assert tokens(client) == ["a-b", "a", "x%y", "ab"]
    assert leave(client, "x%y") and leave(client, "a")
    assert tokens(client) == ["a-b", "ab"]
    assert not leave(client, "b")  # a suffix of 'a-b' and 'ab', no place of its own


@pytest.mark.parametrize("gone", ["a", "b", "c"])
def test_leaving_from_any_place_keeps_the_separators(client: Any, gone: str) -> None:
    for token in ("a", "b", "c"):
        place(client, token)
    assert leave(client, gone)
    assert tokens(client) == [t for t in ("a", "b", "c") if t != gone]
    assert not leave(client, gone)


def test_the_last_to_leave_deletes_the_line(client: Any) -> None:
    place(client, "a")
    assert leave(client, "a")
    assert client.get(KEY) is None


def test_a_place_past_its_deadline_is_not_left_but_passed_over(client: Any) -> None:
    place(client, "dead", ttl_ms=100)
    place(client, "live", ttl_ms=5000)
    assert not leave(client, "dead", at=200)  # it had no live place to leave
    assert pop(client, at=200) == "live"  # the dead place goes with it
    assert client.get(KEY) is None
    assert pop(client) is None


def test_pops_take_places_in_order_and_keep_the_ttl(client: Any) -> None:
    for token in ("a", "b", "c"):
        place(client, token)
    ttl = client.pttl(KEY)
    assert [pop(client), tokens(client)] == ["a", ["b", "c"]]
    assert 0 < client.pttl(KEY) <= ttl
    assert [pop(client), pop(client), pop(client)] == ["b", "c", None]
    assert client.get(KEY) is None


def test_a_long_line_is_tidied_of_dead_places(client: Any) -> None:
    # About 4.5 KB of places, every one past its deadline at the probe's clock + 2 s; each
    # lives a second of real time, so a slow machine does not see the line's key expire
    # (and come back shorter than the tidying size) while the places are put.
    for index in range(60):
        place(client, f"dead{index:02}-{'x' * 40}", ttl_ms=1000)
    place(client, "live", at=2000)
    assert tokens(client) == ["live"]
