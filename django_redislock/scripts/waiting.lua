-- Who waits in a semaphore's or read-write lock's line, for inspection: a hash (its key
-- given as `records` by the script that includes this) of token -> '<since_ms>|<mode>|
-- <holder description>' (mode 'r' or 'w' for a read-write lock, '' for a semaphore), and
-- a sorted set (`untils`) of token -> when the record lapses unless renewed (ms). A
-- record is written with the waiter's place and goes with it; one past its time is a
-- waiter that stopped renewing (it left or died): readers pass over it, and the next
-- put drops it. Both keys live as long as the last record. Only commands the minimal
-- ACL of SECURITY.md allows.

-- Drop token's record.
local function waiting_drop(records, untils, token)
  redis.call('HDEL', records, token)
  redis.call('ZREM', untils, token)
end

-- Put (or renew) token's record: since_ms is when it began to wait (by the server's
-- clock: its first try, or now less what the waiter says it has waited).
local function waiting_put(records, untils, now_ms, token, since_ms, place_ms, mode, description)
  local lapsed = redis.call('ZRANGEBYSCORE', untils, '-inf', '(' .. now_ms)
  for _, gone in ipairs(lapsed) do
    waiting_drop(records, untils, gone)
  end
  redis.call('HSET', records, token, since_ms .. '|' .. mode .. '|' .. description)
  redis.call('ZADD', untils, now_ms + place_ms, token)
  if redis.call('PTTL', untils) < place_ms then
    redis.call('PEXPIRE', records, place_ms)
    redis.call('PEXPIRE', untils, place_ms)
  end
end
