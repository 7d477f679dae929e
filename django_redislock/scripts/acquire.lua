-- Acquire a lock: SET NX PX, bump the fence counter and write the holder's
-- metadata, atomically.
-- KEYS[1] lock key (string: the token)
-- KEYS[2] fence counter (integer, no TTL: it must never go back)
-- KEYS[3] holder metadata (hash, same TTL as the lock)
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] '1' to bump the fence, '0' not to,
-- ARGV[4..] metadata field/value pairs
-- Returns {1, fence} when acquired (fence 0 without fencing), or {0, pttl} with
-- the holder's remaining TTL in ms when someone else holds it.
local current = redis.call('GET', KEYS[1])
if current == ARGV[1] then
  -- Our own token is already there: a retried call whose first reply was lost.
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[3], 'fence') or '0')}
end
if current then
  return {0, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local fence = 0
if ARGV[3] == '1' then
  fence = redis.call('INCR', KEYS[2])
end
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[3], 'fence', fence, unpack(ARGV, 4))
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, fence}
