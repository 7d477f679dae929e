-- Redlock fence write-back: raise this node's fence counter to the holder's
-- fence (counter = max(counter, fence)), only while our token still holds the
-- lock here, and record the fence with the holder (held.lua; in the metadata of a key an
-- older release wrote).
-- KEYS[1] lock key, KEYS[2] fence counter (no TTL), KEYS[3] holder metadata
-- ARGV[1] token, ARGV[2] fence
-- Returns 1 when this node now has counter >= fence under our token, 0 when
-- the lock is not ours here (expired or never landed).
local value = redis.call('GET', KEYS[1])
if held_token(value) ~= ARGV[1] then
  return 0
end
local fence = tonumber(ARGV[2])
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < fence then
  redis.call('SET', KEYS[2], ARGV[2])
end
if value ~= ARGV[1] then
  local _, holder = held_fields(value, KEYS[3])
  local left = redis.call('PTTL', KEYS[1])
  if left > 0 then
    redis.call('SET', KEYS[1], held_value(ARGV[1], ARGV[2], holder), 'PX', left)
  end
elseif redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'fence', ARGV[2])
end
return 1
