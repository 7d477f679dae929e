-- Acquire a lock: SET NX PX, bump the fence counter and write the holder's
-- metadata, atomically; with a claim key, the longest waiter goes first.
-- KEYS[1] lock key (string: the token)
-- KEYS[2] fence counter (integer, no TTL: it must never go back)
-- KEYS[3] holder metadata (hash: fence, holder; same TTL as the lock)
-- KEYS[4] optional claim of the longest waiter on the next turn, short TTL:
--         "token:waited_ms:ttl_ms:fencing:holder" (what release.lua needs to
--         hand the lock straight to it)
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] '1' to bump the fence, '0' not to,
-- ARGV[4] holder description, ARGV[5] ms this caller has waited so far,
-- ARGV[6] claim TTL in ms
-- Returns {1, fence} when acquired (fence 0 without fencing), or
-- {0, ms, now_ms[, token, fence, holder]} with how long the caller may sleep
-- before the next attempt (the holder's remaining TTL, or the remaining life of
-- a longer waiter's claim), the server's clock (TIME, in ms; -1 without a claim
-- key or where the ACL refuses TIME): a waiter compares it with the time a
-- release handed the lock to it (release.lua), to tell a live hand-off from a
-- stale one; and, when someone holds the lock, who: its token, fence and holder
-- description ('' when unknown), so a busy caller needs no second call to say who.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  -- Our own token is already there: a retried call whose first reply was lost.
  -- (Metadata first, here and below: it must never outlive the lock key.)
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[3], 'fence') or '0')}
end
local waited = tonumber(ARGV[5] or '0')
local claimant, claimed = nil, -1
if KEYS[4] then
  local claim = redis.call('GET', KEYS[4])
  if claim then
    local who, how_long = string.match(claim, '^([^:]+):(%d+):')
    claimant, claimed = who, tonumber(how_long)
  end
end
if current or (claimant and claimant ~= ARGV[1] and claimed > waited) then
  -- Held, or a longer waiter has the next turn. The longest waiter claims it.
  if KEYS[4] and waited > 0 and (claimant == nil or claimant == ARGV[1] or waited > claimed) then
    redis.call('SET', KEYS[4], ARGV[1] .. ':' .. waited .. ':' .. ARGV[2] .. ':' .. ARGV[3]
      .. ':' .. ARGV[4], 'PX', ARGV[6])
  end
  local wait = redis.call('PTTL', current and KEYS[1] or KEYS[4])
  -- Only a waiter with a claim key can be handed the lock. pcall: an ACL without
  -- TIME only costs the heir of a hand-off a confirming attempt.
  local now = KEYS[4] and redis.pcall('TIME')
  local now_ms = -1
  if now and not now.err then
    now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  end
  if not current then
    return {0, wait, now_ms}
  end
  -- HGET, not HMGET: the minimal ACL (SECURITY.md) has no HMGET.
  local fence = redis.call('HGET', KEYS[3], 'fence') or ''
  return {0, wait, now_ms, current, fence, redis.call('HGET', KEYS[3], 'holder') or ''}
end
if claimant == ARGV[1] then
  redis.call('DEL', KEYS[4])
end
local fence = 0
if ARGV[3] == '1' then
  fence = redis.call('INCR', KEYS[2])
end
redis.call('HSET', KEYS[3], 'fence', fence, 'holder', ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, fence}
