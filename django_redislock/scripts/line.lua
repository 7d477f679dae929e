-- The line of waiters behind a lock's claimant, in one string key (KEYS named by
-- the script that includes this): records '<deadline_ms>:<claim>' separated by
-- \30 (ASCII RS, never in a claim: holder.py keeps it out), oldest first. A record
-- past its deadline is a waiter that stopped renewing its place (it left or died):
-- it is dropped wherever it is read. <claim> is the claim key's own format.
-- The server's clock in ms, or -1 where the ACL refuses TIME (pcall: then there is
-- no line, and the heir of a hand-off confirms it with an attempt).
local function line_clock()
  local now = redis.pcall('TIME')
  if now.err then
    return -1
  end
  return tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
end

local function line_read(key, now_ms)
  local live = {}
  local line = redis.call('GET', key)
  if line then
    live.existed = true
    for record in string.gmatch(line, '[^\30]+') do
      local deadline = tonumber(string.match(record, '^(%d+):'))
      if deadline and deadline >= now_ms then
        live[#live + 1] = record
      end
    end
  end
  return live
end

-- The key lives as long as its last place.
local function line_write(key, live, now_ms)
  local last = 0
  for i = 1, #live do
    last = math.max(last, tonumber(string.match(live[i], '^(%d+):')))
  end
  if #live == 0 then
    if live.existed then
      redis.call('DEL', key)
    end
  else
    redis.call('SET', key, table.concat(live, '\30'), 'PX', math.max(1, last - now_ms))
  end
end

local function line_token(record)
  return string.match(record, '^%d+:([^:]+):')
end

-- Put (or keep) token's place, with claim, renewed until now_ms + ttl_ms; first=true
-- puts it at the head (a claimant a longer waiter displaced keeps its turn next).
local function line_place(key, now_ms, token, claim, ttl_ms, first)
  local live = line_read(key, now_ms)
  local record = (now_ms + tonumber(ttl_ms)) .. ':' .. claim
  local placed = false
  for i = 1, #live do
    if line_token(live[i]) == token then
      live[i] = record
      placed = true
    end
  end
  if not placed then
    if first then
      table.insert(live, 1, record)
    else
      live[#live + 1] = record
    end
  end
  line_write(key, live, now_ms)
end

-- Remove token's place; true if it had one.
local function line_leave(key, now_ms, token)
  local live = line_read(key, now_ms)
  for i = 1, #live do
    if line_token(live[i]) == token then
      table.remove(live, i)
      line_write(key, live, now_ms)
      return true
    end
  end
  return false
end

-- Take the first live place: its claim and the ms its place has left (a waiter that
-- died keeps no longer than it would have in line), or nil when nobody waits in line.
local function line_pop(key, now_ms)
  local live = line_read(key, now_ms)
  local first = table.remove(live, 1)
  line_write(key, live, now_ms)
  if first then
    local deadline, claim = string.match(first, '^(%d+):(.*)$')
    return claim, math.max(1, tonumber(deadline) - now_ms)
  end
  return nil
end
