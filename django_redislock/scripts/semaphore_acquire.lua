-- Take a permit of a semaphore: one lease per holder, at most `limit` live at once,
-- waiters served longest first. The server's clock decides every expiry.
-- KEYS[1] permits (sorted set: holder token -> lease expiry, ms)
-- KEYS[2] holder metadata (hash: token -> "fence|limit|holder description")
-- KEYS[3] fence counter (integer, no TTL: it must never go back)
-- KEYS[4] waiters in line (sorted set: token -> when it first tried, ms)
-- KEYS[5] waiters' places (sorted set: token -> when its place lapses unless renewed, ms)
-- KEYS[6], KEYS[7] optional: who waits, for inspection (waiting.lua), written with each
--         place
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] '1' to bump the fence, '0' not to,
-- ARGV[4] holder description, ARGV[5] ms this caller has waited (0: first try),
-- ARGV[6] ms a waiter's place lives without renewal, ARGV[7] the caller's limit
-- Returns {1, fence}, or {0, ms, now_ms}: how long the caller may sleep before trying
-- again (until the soonest lease ends, or a waiter ahead's place would lapse).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token, ttl = ARGV[1], tonumber(ARGV[2])
local waited, place, limit = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])

local function drop(keys, members)
  for i = 1, #members, 500 do
    local chunk = {unpack(members, i, math.min(i + 499, #members))}
    for _, key in ipairs(keys) do redis.call(key[1], key[2], unpack(chunk)) end
  end
end
-- A lease that ran out frees its permit; a waiter that stopped renewing its place leaves.
drop({{'ZREM', KEYS[1]}, {'HDEL', KEYS[2]}}, redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now))
drop({{'ZREM', KEYS[4]}, {'ZREM', KEYS[5]}}, redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now))

local function expire_with_last(key, others)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if last then
    for _, k in ipairs(others) do redis.call('PEXPIRE', k, tonumber(last) - now) end
  end
end

local mine = redis.call('ZSCORE', KEYS[1], token)
if mine then
  -- Our own permit is already there: a retried call whose first reply was lost.
  local meta = redis.call('HGET', KEYS[2], token) or '0|'
  return {1, tonumber(string.match(meta, '^(%d+)|')) or 0}
end

if waited > 0 then
  -- A waiter: its place in line is when it first tried, so it may go in ahead of
  -- waiters already there (taken before it is ranked: a waiter refused only for those
  -- it then stands ahead of would sleep while first in line). Renewing it keeps it.
  redis.call('ZADD', KEYS[4], 'NX', now - waited, token)
  redis.call('ZADD', KEYS[5], now + place, token)
  expire_with_last(KEYS[5], {KEYS[4], KEYS[5]})
  if KEYS[7] then
    local since = redis.call('ZSCORE', KEYS[4], token)
    waiting_put(KEYS[6], KEYS[7], now, token, since, place, '', ARGV[4])
  end
end

local used = redis.call('ZCARD', KEYS[1])
local ahead = redis.call('ZRANK', KEYS[4], token) or redis.call('ZCARD', KEYS[4])
if used + ahead < limit then
  redis.call('ZREM', KEYS[4], token)
  redis.call('ZREM', KEYS[5], token)
  if waited > 0 and KEYS[7] then waiting_drop(KEYS[6], KEYS[7], token) end
  local fence = 0
  if ARGV[3] == '1' then fence = redis.call('INCR', KEYS[3]) end
  redis.call('ZADD', KEYS[1], now + ttl, token)
  redis.call('HSET', KEYS[2], token, fence .. '|' .. limit .. '|' .. ARGV[4])
  expire_with_last(KEYS[1], {KEYS[2], KEYS[1]})
  return {1, fence}
end

local wait
if used >= limit then
  wait = tonumber(redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]) - now
else
  -- Permits are free but longer waiters have them: try again when the first place
  -- in line could lapse (a waiter that died holds the others back no longer).
  local soonest = redis.call('ZRANGE', KEYS[5], 0, 0, 'WITHSCORES')[2]
  wait = soonest and (tonumber(soonest) - now) or place
end
return {0, math.max(wait, 1), now}
