-- Remove a read-write lock's holders whoever they are (or only the given token) and
-- wake every waiter. The fence counter and the writers' line are left alone.
-- KEYS[1] holders, KEYS[2] leases, KEYS[3] holder metadata
-- ARGV[1] release channel, ARGV[2] token, or '' for every holder
-- Returns 1 when something was removed, 0 when nothing was held.
local removed
if ARGV[2] == '' then
  removed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3]) > 0 and 1 or 0
else
  removed = redis.call('SREM', KEYS[1], ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[2])
  redis.call('HDEL', KEYS[3], ARGV[2])
end
if removed == 1 then
  redis.call('PUBLISH', ARGV[1], WAKE_FREED_OUT_OF_TURN)
end
return removed
