-- Redlock fence write-back: raise this node's fence counter to the holder's
-- fence (counter = max(counter, fence)), only while our token still holds the
-- lock here, and record the fence in the holder metadata.
-- KEYS[1] lock key, KEYS[2] fence counter (no TTL), KEYS[3] holder metadata
-- ARGV[1] token, ARGV[2] fence
-- Returns 1 when this node now has counter >= fence under our token, 0 when
-- the lock is not ours here (expired or never landed).
if held_token(redis.call('GET', KEYS[1])) ~= ARGV[1] then
  return 0
end
local fence = tonumber(ARGV[2])
local current = tonumber(redis.call('GET', KEYS[2]) or '0')
if current < fence then
  redis.call('SET', KEYS[2], ARGV[2])
end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('HSET', KEYS[3], 'fence', ARGV[2])
end
return 1
