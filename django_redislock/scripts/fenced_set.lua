-- Write a value only if the writer's fence is newer than the last accepted one:
-- the guard for a protected resource that lives in Redis.
-- KEYS[1] the resource key, KEYS[2] the resource's last accepted fence
-- ARGV[1] the value, ARGV[2] the writer's fence
-- Returns 1 when written, 0 when rejected (a newer holder already wrote).
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) <= last then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return 1
