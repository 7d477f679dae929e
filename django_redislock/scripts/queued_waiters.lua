-- Who waits in a semaphore's or read-write lock's line (inspection), in one call.
-- KEYS[1] waiting records, KEYS[2] when each lapses (waiting.lua)
-- Returns {token, record, ...} of every live record.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local out = {}
for _, token in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], now, '+inf')) do
  local record = redis.call('HGET', KEYS[1], token)
  if record then
    out[#out + 1] = token
    out[#out + 1] = record
  end
end
return out
