-- Who holds a lock: its token, remaining TTL and holder metadata, in one call.
-- KEYS[1] lock key, KEYS[2] holder metadata
-- Returns {} when nobody holds it, else {token, pttl in ms, fence ('' when unknown),
-- holder description ('' when unknown)}.
local value = redis.call('GET', KEYS[1])
if not value then
  return {}
end
local fence, holder = held_fields(value, KEYS[2])
return {held_token(value), redis.call('PTTL', KEYS[1]), fence, holder}
