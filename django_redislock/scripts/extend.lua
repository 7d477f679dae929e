-- Reset the remaining TTL of a lock only if it still holds our token. Never
-- re-creates a lock that is gone.
-- KEYS[1] lock key (held.lua), KEYS[2] holder metadata of a key an older release wrote
-- ARGV[1] token, ARGV[2] new TTL in ms
-- Returns 1 when extended, 0 when the lock is not ours.
local value = redis.call('GET', KEYS[1])
if held_token(value) == ARGV[1] then
  if value == ARGV[1] then
    -- The bare token, its metadata beside it: first, it must never outlive the lock key.
    redis.call('PEXPIRE', KEYS[2], ARGV[2])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
