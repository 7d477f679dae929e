-- A fenced read of the fault suite's counter (test code): the resource remembers the
-- highest fence that read it, and refuses reads (and, in resource.lua, writes) with a
-- lower one. A holder paused between its read and its write, past its TTL, then cannot
-- write a counter its successor has already read: write-only fencing lets that late
-- write in when it lands before the successor's own, and one increment is lost.
-- KEYS[1] counter, KEYS[2] highest fence seen
-- ARGV[1] reader's fence, ARGV[2] '1' = check fences
-- Returns the counter, or false when the read is refused as stale.
local fence = tonumber(ARGV[1])
local seen = tonumber(redis.call('GET', KEYS[2]) or '0')
if ARGV[2] == '1' and fence < seen then
  return false
end
if fence > seen then
  redis.call('SET', KEYS[2], ARGV[1])
end
return tonumber(redis.call('GET', KEYS[1]) or '0')
