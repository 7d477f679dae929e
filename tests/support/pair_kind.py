"""A lock kind defined only in the tests: the *pair*, a lock two holders may hold at once.

Built by following docs/architecture.md, "Adding a lock kind", and nothing else: its
keys, its scripts, its operations, a lock class and a registration. Nothing in the admin,
the ``redislock`` command or inspection names it, yet they show and release it
(``tests/test_kind_walkthrough.py``).

Keys: ``P:{N}`` a hash, holder token -> lease expiry (the server's clock, ms); ``P:{N}:meta``
a hash, token -> "fence|holder description"; ``P:{N}:fence`` the fence counter (a string,
as the mutex's). Both hashes expire with the last lease, so nothing outlives the holders.
"""

from __future__ import annotations

from typing import Any

from django_redislock import Lock, registry
from django_redislock.holder import holder_description
from django_redislock.kinds import KindOptions
from django_redislock.kinds.holders import Holders, holder_state
from django_redislock.kinds.mutex import parse_acquire
from django_redislock.kinds.operation import Operation, is_one, raw
from django_redislock.scripts import Script

LIMIT = 2

# Shared by every script: the server's clock in ms, and the live leases (expired ones pruned,
# the hashes' TTL set to the latest lease).
_PRUNE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function live_leases()
  local flat = redis.call('HGETALL', KEYS[1])
  local leases, latest = {}, 0
  for i = 1, #flat, 2 do
    local expiry = tonumber(flat[i + 1])
    if expiry <= now then
      redis.call('HDEL', KEYS[1], flat[i])
      redis.call('HDEL', KEYS[2], flat[i])
    else
      leases[#leases + 1] = {flat[i], expiry}
      if expiry > latest then latest = expiry end
    end
  end
  return leases, latest
end
local function expire_at(latest)
  if latest > now then
    redis.call('PEXPIRE', KEYS[1], latest - now)
    redis.call('PEXPIRE', KEYS[2], latest - now)
  end
end
"""

# KEYS: lease hash, meta hash, fence counter. ARGV: token, ttl ms, fencing '1'/'0', description.
ACQUIRE = Script(
    "pair_acquire",
    _PRUNE
    + """
local leases, latest = live_leases()
if #leases >= tonumber(ARGV[5]) then
  local soonest = leases[1][2]
  for _, lease in ipairs(leases) do
    if lease[2] < soonest then soonest = lease[2] end
  end
  return {0, soonest - now, now}
end
local fence = 0
if ARGV[3] == '1' then fence = redis.call('INCR', KEYS[3]) end
local expiry = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], expiry)
redis.call('HSET', KEYS[2], ARGV[1], fence .. '|' .. ARGV[4])
expire_at(math.max(latest, expiry))
return {1, fence}
""",
)

# KEYS: lease hash, meta hash. ARGV: token, release channel.
RELEASE = Script(
    "pair_release",
    """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[2], WAKE_FREED_OUT_OF_TURN)
return 1
""",
)

# KEYS: lease hash, meta hash. ARGV: token, ttl ms.
EXTEND = Script(
    "pair_extend",
    _PRUNE
    + """
local leases, latest = live_leases()
for _, lease in ipairs(leases) do
  if lease[1] == ARGV[1] then
    local expiry = now + tonumber(ARGV[2])
    redis.call('HSET', KEYS[1], ARGV[1], expiry)
    expire_at(math.max(latest, expiry))
    return 1
  end
end
return 0
""",
)

# KEYS: lease hash, meta hash. Returns {token, pttl, fence, description} per live holder.
READ = Script(
    "pair_read",
    _PRUNE
    + """
local leases = live_leases()
local out = {}
for _, lease in ipairs(leases) do
  local meta = redis.call('HGET', KEYS[2], lease[1]) or '0|'
  local bar = string.find(meta, '|', 1, true)
  local fence, text = string.sub(meta, 1, bar - 1), string.sub(meta, bar + 1)
  out[#out + 1] = {lease[1], lease[2] - now, fence, text}
end
return out
""",
)

# KEYS: lease hash, meta hash. ARGV: release channel, token ('' for every holder).
FORCE_RELEASE = Script(
    "pair_force_release",
    """
local removed
if ARGV[2] == '' then
  removed = redis.call('DEL', KEYS[1], KEYS[2]) > 0 and 1 or 0
else
  removed = redis.call('HDEL', KEYS[1], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[2])
end
if removed == 1 then redis.call('PUBLISH', ARGV[1], WAKE_FREED_OUT_OF_TURN) end
return removed
""",
)


def parse_holders(reply: Any) -> Holders:
    states = [holder_state(token, int(pttl), fence, text) for token, pttl, fence, text in reply]
    return Holders(tuple(sorted(states, key=lambda s: (s.fence, s.token))), LIMIT)


class Pair(KindOptions):
    """The operations of one pair lock (``kinds.interface.KindOperations``): the keys and
    holder options come from ``KindOptions`` (keys alone: what inspection builds to read
    and release)."""

    __slots__ = ()

    kind = "pair"

    @classmethod
    def of(cls, lock: Any, *, claim_ms: int | None) -> Pair:
        # No claims: waiters are woken by every release and race for the free place.
        return cls(lock.keys, **KindOptions.read_from(lock))

    def _both(self) -> tuple[str, str]:
        return (self.keys.key, self.keys.meta)

    def acquire(self, token: str, waited_ms: int = 0) -> Operation:
        description = holder_description(self.purpose, self.watchdog, self.ttl_ms)
        args = (token, self.ttl_ms, "1" if self.fencing else "0", description, LIMIT)
        keys = (*self._both(), self.keys.fence)
        return Operation(ACQUIRE, keys, args, parse_acquire, durable=True, ttl_ms=self.ttl_ms)

    def release(self, token: str) -> Operation:
        return Operation(RELEASE, self._both(), (token, self.keys.channel), is_one)

    def extend(self, token: str, ttl_ms: int | None = None) -> Operation:
        ttl = self.ttl_ms if ttl_ms is None else ttl_ms
        return Operation(EXTEND, self._both(), (token, ttl), is_one, durable=True, ttl_ms=ttl)

    def unclaim(self, token: str) -> Operation:
        return self.release(token)  # no claims: only a grant we never saw could be left

    def read_holders(self) -> Operation:
        return Operation(READ, self._both(), (), parse_holders)

    def force_release(self, token: str | None = None) -> Operation:
        return Operation(FORCE_RELEASE, self._both(), (self.keys.channel, token or ""), raw)


class PairLock(Lock):
    """A pair lock on one server: ``Lock``'s whole surface over the pair kind."""

    operations = Pair


KIND = registry.Kind(
    "pair", operations=Pair, classes={"redis": f"{__name__}.PairLock"}, redis_type="hash"
)
