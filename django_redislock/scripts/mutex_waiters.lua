-- Who waits for a lock (inspection): the longest waiter's claim on the next turn and
-- the live places of the line behind it (line.lua), in one call.
-- KEYS[1] claim key, KEYS[2] line
-- Returns {claim ('' when none), claim of each live place in line, oldest first}; a
-- claim is "token:waited_ms:ttl_ms:fencing[/wake]:holder", as acquire.lua writes it.
local out = {redis.call('GET', KEYS[1]) or ''}
local now_ms = line_clock()
if now_ms >= 0 then
  for _, record in ipairs(line_read(KEYS[2], now_ms)) do
    out[#out + 1] = string.match(record, '^%d+:(.*)$')
  end
end
return out
