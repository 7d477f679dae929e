-- Delete a lock whoever holds it (or, given a token, only if that holder still
-- holds it) and wake the waiters. The fence counter is left alone, so the next
-- holder's fence is still higher.
-- KEYS[1] lock key, KEYS[2] holder metadata
-- ARGV[1] release channel, ARGV[2] expected token or '' for any holder
-- Publishes WAKE_FREED_OUT_OF_TURN (defined from django_redislock/wakeups.py at load).
-- Returns 1 when deleted, 0 when nobody held it, -1 when another token holds it.
local current = held_token(redis.call('GET', KEYS[1]))
if not current then
  return 0
end
if ARGV[2] ~= '' and current ~= ARGV[2] then
  return -1
end
redis.call('DEL', KEYS[1], KEYS[2])
-- Out of turn: wake every waiter (a claimant may be queued behind others in its process).
redis.call('PUBLISH', ARGV[1], WAKE_FREED_OUT_OF_TURN)
return 1
