-- Take a read-write lock for reading ('r': beside other readers) or writing ('w': alone).
-- Writers are not starved: while a writer waits in line, new readers wait behind it;
-- a writer's place lapses unless renewed, so a dead writer holds readers back briefly.
-- KEYS[1] holders (set of tokens: its Redis type tells inspection the kind)
-- KEYS[2] leases (sorted set: token -> lease expiry, ms, by the server's clock)
-- KEYS[3] holder metadata (hash: token -> "fence|mode|holder description")
-- KEYS[4] fence counter (integer, no TTL: it must never go back)
-- KEYS[5] writers in line (sorted set: token -> when it first tried, ms)
-- KEYS[6] writers' places (sorted set: token -> when its place lapses unless renewed, ms)
-- KEYS[7], KEYS[8] optional: who waits, writers and readers, for inspection
--         (waiting.lua); a reader has a record but no place: it waits by retrying
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] '1' to bump the fence, '0' not to,
-- ARGV[4] holder description, ARGV[5] ms this caller has waited (0: first try),
-- ARGV[6] ms a writer's place lives without renewal, ARGV[7] 'r' or 'w'
-- Returns {1, fence}, or {0, ms, now_ms}: how long the caller may sleep before trying
-- again (a writer refused on its first try is told 1 ms: come back to take a place).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token, ttl = ARGV[1], tonumber(ARGV[2])
local waited, place, mode = tonumber(ARGV[5]), tonumber(ARGV[6]), ARGV[7]

local function drop(keys, members)
  for i = 1, #members, 500 do
    local chunk = {unpack(members, i, math.min(i + 499, #members))}
    for _, key in ipairs(keys) do redis.call(key[1], key[2], unpack(chunk)) end
  end
end
-- A lease that ran out frees its holder's share; a writer that stopped renewing leaves.
drop({{'SREM', KEYS[1]}, {'ZREM', KEYS[2]}, {'HDEL', KEYS[3]}},
  redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now))
drop({{'ZREM', KEYS[5]}, {'ZREM', KEYS[6]}}, redis.call('ZRANGEBYSCORE', KEYS[6], '-inf', now))
-- A refused reader that will try again: recorded (not placed) for inspection.
local function reader_waits()
  if waited > 0 and KEYS[8] then
    waiting_put(KEYS[7], KEYS[8], now, token, now - waited, place, 'r', ARGV[4])
  end
end

local function first_ends(key)
  local score = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
  return score and (tonumber(score) - now)
end
local function expire_with_last(key, others)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
  if last then
    for _, k in ipairs(others) do redis.call('PEXPIRE', k, tonumber(last) - now) end
  end
end

if redis.call('ZSCORE', KEYS[2], token) then
  -- Ours already: a retried call whose first reply was lost.
  local meta = redis.call('HGET', KEYS[3], token) or '0|'
  return {1, tonumber(string.match(meta, '^(%d+)|')) or 0}
end

local held = redis.call('SCARD', KEYS[1])
if mode == 'r' then
  if held == 1 then
    local meta = redis.call('HGET', KEYS[3], redis.call('SRANDMEMBER', KEYS[1])) or ''
    if string.match(meta, '^%d*|w|') then
      reader_waits()
      return {0, math.max(first_ends(KEYS[2]), 1), now}
    end
  end
  if redis.call('ZCARD', KEYS[5]) > 0 then
    -- A writer waits: readers go behind it until it has been in, or its place lapses.
    reader_waits()
    return {0, math.max(first_ends(KEYS[6]) or place, 1), now}
  end
else
  if waited > 0 then
    -- A waiter's place is when it first tried; renewing it keeps it.
    redis.call('ZADD', KEYS[5], 'NX', now - waited, token)
    redis.call('ZADD', KEYS[6], now + place, token)
    expire_with_last(KEYS[6], {KEYS[5], KEYS[6]})
    if KEYS[8] then
      local since = redis.call('ZSCORE', KEYS[5], token)
      waiting_put(KEYS[7], KEYS[8], now, token, since, place, 'w', ARGV[4])
    end
  end
  local ahead = redis.call('ZRANK', KEYS[5], token) or redis.call('ZCARD', KEYS[5])
  if held > 0 or ahead > 0 then
    local wait
    if waited == 0 then
      wait = 1
    elseif held > 0 then
      wait = first_ends(KEYS[2])
    else
      wait = first_ends(KEYS[6]) or place
    end
    return {0, math.max(wait, 1), now}
  end
  redis.call('ZREM', KEYS[5], token)
  redis.call('ZREM', KEYS[6], token)
end

if waited > 0 and KEYS[8] then waiting_drop(KEYS[7], KEYS[8], token) end
local fence = 0
if ARGV[3] == '1' then fence = redis.call('INCR', KEYS[4]) end
redis.call('SADD', KEYS[1], token)
redis.call('ZADD', KEYS[2], now + ttl, token)
redis.call('HSET', KEYS[3], token, fence .. '|' .. mode .. '|' .. ARGV[4])
expire_with_last(KEYS[2], {KEYS[1], KEYS[2], KEYS[3]})
return {1, fence}
