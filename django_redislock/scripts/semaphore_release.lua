-- Give back a permit of a semaphore and wake the waiters (each process's longest one).
-- KEYS[1] permits, KEYS[2] holder metadata
-- ARGV[1] token, ARGV[2] release channel
-- Returns 1 when the token held a permit, 0 when it did not (expired or released).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[2], WAKE_FREE)
return 1
