-- The line of waiters behind a lock's claimant, in one string key (KEYS named by
-- the script that includes this): records '<deadline_ms>:<claim>' separated by
-- \30 (ASCII RS, never in a claim: holder.py keeps it out), oldest first. A record
-- past its deadline is a waiter that stopped renewing its place (it left or died):
-- line_pop passes over it and drops it, a long line is tidied of it. <claim> is the
-- claim key's own format. The key lives as long as its last place (or longer: a pop
-- keeps its TTL).
-- The server's clock in ms, or -1 where the ACL refuses TIME (pcall: then there is
-- no line, and the heir of a hand-off confirms it with an attempt).
local function line_clock()
  local now = redis.pcall('TIME')
  if now.err then
    return -1
  end
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

-- The live records of the line at key.
local function line_read(key, now_ms)
  local live = {}
  local line = redis.call('GET', key)
  if line then
    for record in string.gmatch(line, '[^\30]+') do
      local deadline = tonumber(string.match(record, '^(%d+):'))
      if deadline and deadline >= now_ms then
        live[#live + 1] = record
      end
    end
  end
  return live
end

-- Where token's record is in line: its first and last byte, or nil. Only a record's
-- start is digits then ':<token>:' (a claim's holder description has no RS in it).
local function line_find(line, token)
  local field = ':' .. (string.gsub(token, '%W', '%%%0')) .. ':'
  local first, last = string.find(line, '^%d+' .. field)
  if not first then
    first, last = string.find(line, '\30%d+' .. field)
    if not first then
      return nil
    end
    first = first + 1
  end
  local after = string.find(line, '\30', last, true)
  return first, (after or #line + 1) - 1
end

-- A line longer than this is rewritten without its dead places when a place is put:
-- elsewhere they are only passed over (line_pop), which keeps the common path to a
-- string search.
local LINE_TIDY_BYTES = 4096

-- Put (or keep) token's place, with claim, renewed until now_ms + ttl_ms; first=true
-- puts it at the head (a claimant a longer waiter displaced keeps its turn next).
local function line_place(key, now_ms, token, claim, ttl_ms, first)
  local line = redis.call('GET', key)
  local record = (now_ms + tonumber(ttl_ms)) .. ':' .. claim
  if not line then
    redis.call('SET', key, record, 'PX', ttl_ms)
    return
  end
  if #line > LINE_TIDY_BYTES then
    local live = line_read(key, now_ms)
    line = table.concat(live, '\30')
    if line == '' then
      redis.call('SET', key, record, 'PX', ttl_ms)
      return
    end
  end
  local start, stop = line_find(line, token)
  if start then
    line = string.sub(line, 1, start - 1) .. record .. string.sub(line, stop + 1)
  elseif first then
    line = record .. '\30' .. line
  else
    line = line .. '\30' .. record
  end
  -- The key lives as long as its last place.
  local left = redis.call('PTTL', key)
  redis.call('SET', key, line, 'PX', math.max(tonumber(ttl_ms), left))
end

-- Remove token's live place; true if it had one.
local function line_leave(key, now_ms, token)
  local line = redis.call('GET', key)
  if not line then
    return false
  end
  local start, stop = line_find(line, token)
  if not start or tonumber(string.match(line, '^%d+', start)) < now_ms then
    return false
  end
  local rest = ''
  if stop < #line then  -- the record and the separator after it
    rest = string.sub(line, 1, start - 1) .. string.sub(line, stop + 2)
  elseif start > 1 then  -- the last record and the separator before it
    rest = string.sub(line, 1, start - 2)
  end
  if rest == '' then
    redis.call('DEL', key)
  else
    redis.call('SET', key, rest, 'KEEPTTL')
  end
  return true
end

-- Take the first live place: its claim and the ms its place has left (a waiter that
-- died keeps no longer than it would have in line), or nil when nobody waits in line.
-- Dead places before it go with it; the rest keeps the key's TTL.
local function line_pop(key, now_ms)
  local line = redis.call('GET', key)
  if not line then
    return nil
  end
  local at = 1
  while at <= #line do
    local after = string.find(line, '\30', at, true)
    local last = (after or #line + 1) - 1
    local deadline, claim = string.match(string.sub(line, at, last), '^(%d+):(.*)$')
    at = last + 2
    deadline = tonumber(deadline)
    if deadline and deadline >= now_ms then
      if at <= #line then
        redis.call('SET', key, string.sub(line, at), 'KEEPTTL')
      else
        redis.call('DEL', key)
      end
      return claim, math.max(1, deadline - now_ms)
    end
  end
  redis.call('DEL', key)
  return nil
end
