-- Renew a semaphore permit's lease if the token still holds it (by the server's clock).
-- KEYS[1] permits (sorted set: token -> lease expiry), KEYS[2..] the keys that expire
-- with the last lease (holder metadata; a read-write lock's holder set too)
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
for i = 1, #KEYS do redis.call('PEXPIRE', KEYS[i], last - now) end
return 1
