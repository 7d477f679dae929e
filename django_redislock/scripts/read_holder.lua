-- Who holds a lock: its token, remaining TTL and holder metadata, in one call.
-- KEYS[1] lock key, KEYS[2] holder metadata
-- Returns {} when nobody holds it, else {token, pttl in ms, fence ('' when unknown),
-- holder description ('' when unknown)}.
local token = redis.call('GET', KEYS[1])
if not token then
  return {}
end
-- HGET, not HMGET: the minimal ACL (SECURITY.md) has no HMGET.
local fence = redis.call('HGET', KEYS[2], 'fence') or ''
local holder = redis.call('HGET', KEYS[2], 'holder') or ''
return {token, redis.call('PTTL', KEYS[1]), fence, holder}
