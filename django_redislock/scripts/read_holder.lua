-- Who holds a lock: its token, remaining TTL and holder metadata, in one call.
-- KEYS[1] lock key, KEYS[2] holder metadata
-- Returns {} when nobody holds it, else {token, pttl in ms, fence ('' when unknown),
-- holder description ('' when unknown)}.
local token = redis.call('GET', KEYS[1])
if not token then
  return {}
end
local meta = redis.call('HMGET', KEYS[2], 'fence', 'holder')
return {token, redis.call('PTTL', KEYS[1]), meta[1] or '', meta[2] or ''}
