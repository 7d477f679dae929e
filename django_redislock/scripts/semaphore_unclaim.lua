-- A waiter of a semaphore (or a read-write lock's writer) leaves the line; the next in line is woken to look again.
-- KEYS[1] waiters in line, KEYS[2] waiters' places, KEYS[3], KEYS[4] optional: who
-- waits (waiting.lua; a waiting reader has a record there and no place)
-- ARGV[1] token, ARGV[2] release channel
-- Returns 1 when it was in line, else 0.
if KEYS[4] then waiting_drop(KEYS[3], KEYS[4], ARGV[1]) end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('PUBLISH', ARGV[2], WAKE_FREED_OUT_OF_TURN)
return 1
