-- Give up a read or write hold of a read-write lock; when the last holder leaves, wake
-- every waiter (readers all go in together; the first writer in line goes alone).
-- KEYS[1] holders, KEYS[2] leases, KEYS[3] holder metadata
-- ARGV[1] token, ARGV[2] release channel
-- Returns 1 when the token held it, 0 when it did not (its lease ran out, or released).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[2], ARGV[1])
if not expiry then
  return 0
end
redis.call('SREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
if redis.call('SCARD', KEYS[1]) == 0 then
  redis.call('PUBLISH', ARGV[2], WAKE_FREED_OUT_OF_TURN)
end
if tonumber(expiry) <= now then
  return 0
end
return 1
