-- Every live permit of a semaphore (or lease of a read-write lock), in one call (leases
-- that ran out are left out).
-- KEYS[1] permits or leases (token -> lease expiry), KEYS[2] holder metadata
-- Returns {token, pttl in ms, metadata} per holder, soonest
-- lease end first.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local permits = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
local out = {}
for i = 1, #permits, 2 do
  local meta = redis.call('HGET', KEYS[2], permits[i]) or ''
  out[#out + 1] = {permits[i], tonumber(permits[i + 1]) - now, meta}
end
return out
