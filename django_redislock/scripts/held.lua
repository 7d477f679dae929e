-- A held lock's key P:{N} holds its token, then its fence and holder description:
-- '<token>\30<fence>\30<holder>' (ASCII RS, never in a token, a fence or a
-- description: holder.py keeps it out), so a held lock is one key beside its fence
-- counter. A key written by an older release, or a hand-off from one, is the bare
-- token, its fence and holder in the hash at meta_key (HGET: the minimal ACL has
-- no HMGET).
local function held_token(value)
  if not value then
    return nil
  end
  local cut = string.find(value, '\30', 1, true)
  if cut then
    return string.sub(value, 1, cut - 1)
  end
  return value
end

local function held_value(token, fence, holder)
  return token .. '\30' .. fence .. '\30' .. holder
end

-- fence ('' when unknown) and holder description ('' when unknown) of a held value.
local function held_fields(value, meta_key)
  local token, fence, holder = string.match(value, '^([^\30]*)\30([^\30]*)\30(.*)$')
  if token then
    return fence, holder
  end
  return redis.call('HGET', meta_key, 'fence') or '', redis.call('HGET', meta_key, 'holder') or ''
end
