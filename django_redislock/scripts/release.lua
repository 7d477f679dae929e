-- Release a lock only if it still holds our token, and wake the waiters.
-- KEYS[1] lock key, KEYS[2] holder metadata
-- ARGV[1] token, ARGV[2] release channel
-- Returns 1 when released, 0 when the lock is not ours (expired or re-taken).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
