-- Reset the remaining TTL of a lock only if it still holds our token. Never
-- re-creates a lock that is gone.
-- KEYS[1] lock key, KEYS[2] holder metadata
-- ARGV[1] token, ARGV[2] new TTL in ms
-- Returns 1 when extended, 0 when the lock is not ours.
if held_token(redis.call('GET', KEYS[1])) == ARGV[1] then
  -- Metadata first: it must never outlive the lock key.
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
