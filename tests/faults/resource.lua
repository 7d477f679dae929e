-- The protected resource of the fault-injection suite (test code, not the package's
-- own fenced_set.lua): a counter that accepts a write only with a fence above the
-- last accepted one, and logs every accepted write in order.
-- KEYS[1] counter, KEYS[2] last accepted fence, KEYS[3] log (list of "fence|worker|counter"),
-- KEYS[4] (optional) the highest fence seen by a fenced read (resource_read.lua)
-- ARGV[1] new counter value, ARGV[2] writer's fence, ARGV[3] worker, ARGV[4] '1' = check fences
-- Returns 1 when accepted, 0 when rejected as stale.
local fence = tonumber(ARGV[2])
if ARGV[4] == '1' then
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  if fence <= last then
    return 0
  end
  -- A newer holder has read: this holder's read-modify-write would lose its update.
  if KEYS[4] and fence < tonumber(redis.call('GET', KEYS[4]) or '0') then
    return 0
  end
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
if KEYS[4] then
  redis.call('SET', KEYS[4], ARGV[2])
end
redis.call('RPUSH', KEYS[3], ARGV[2] .. '|' .. ARGV[3] .. '|' .. ARGV[1])
return 1
