-- Give back a permit of a semaphore and wake whoever can take it: the first waiters
-- in line, one per permit now free, wherever they wait (WAKE_TURN_OF); with nobody in
-- line, each process's longest waiter (WAKE_FREE: first tries are not in line yet).
-- KEYS[1] permits, KEYS[2] holder metadata, KEYS[3] waiters in line
-- ARGV[1] token, ARGV[2] release channel, ARGV[3] the limit
-- Returns 1 when the token held a permit, 0 when it did not (expired or released).
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[1])
-- At least the permit given back is free.
local free = math.max(1, tonumber(ARGV[3]) - redis.call('ZCARD', KEYS[1]))
local next_in_line = redis.call('ZRANGE', KEYS[3], 0, free - 1)
if #next_in_line > 0 then
  redis.call('PUBLISH', ARGV[2], WAKE_TURN_OF .. table.concat(next_in_line, ','))
else
  redis.call('PUBLISH', ARGV[2], WAKE_FREE)
end
return 1
