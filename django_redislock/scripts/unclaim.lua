-- A waiter leaves (timed out, cancelled): drop its claim, and if the lock was
-- handed to it meanwhile, release it again so nobody waits for its TTL.
-- KEYS[1] claim key, KEYS[2] lock key, KEYS[3] holder metadata, KEYS[4] optional line
-- (line.lua: its place there goes too)
-- ARGV[1] token, ARGV[2] release channel
-- Publishes WAKE_FREED_OUT_OF_TURN (every waiter retries) when it releases; the
-- WAKE_* names are defined from django_redislock/wakeups.py when the script is loaded.
-- Returns 2 when a lock handed to us was released, 1 when our claim (or place) was
-- dropped, else 0.
local claim = redis.call('GET', KEYS[1])
if claim and string.sub(claim, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  return 1
end
if KEYS[4] then
  local now_ms = line_clock()
  if now_ms >= 0 and line_leave(KEYS[4], now_ms, ARGV[1]) then
    return 1
  end
end
if KEYS[2] and held_token(redis.call('GET', KEYS[2])) == ARGV[1] then
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('PUBLISH', ARGV[2], WAKE_FREED_OUT_OF_TURN)
  return 2
end
return 0
