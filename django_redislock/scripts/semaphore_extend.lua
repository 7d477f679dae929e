-- Renew a semaphore permit's lease if the token still holds it (by the server's clock).
-- KEYS[1] permits, KEYS[2] holder metadata
-- ARGV[1] token, ARGV[2] TTL in ms
-- Returns 1 when renewed, 0 when the token holds no live permit.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not expiry or tonumber(expiry) <= now then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
local last = tonumber(redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])
redis.call('PEXPIRE', KEYS[2], last - now)
redis.call('PEXPIRE', KEYS[1], last - now)
return 1
