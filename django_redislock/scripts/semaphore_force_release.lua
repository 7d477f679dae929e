-- Remove a semaphore's permits whoever holds them (or only the given token's) and wake
-- every waiter. The fence counter and the waiters' line are left alone.
-- KEYS[1] permits, KEYS[2] holder metadata
-- ARGV[1] release channel, ARGV[2] token, or '' for every holder
-- Returns 1 when something was removed, 0 when nothing was held.
local removed
if ARGV[2] == '' then
  removed = redis.call('DEL', KEYS[1], KEYS[2]) > 0 and 1 or 0
else
  removed = redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[2])
end
if removed == 1 then
  redis.call('PUBLISH', ARGV[1], WAKE_FREED_OUT_OF_TURN)
end
return removed
