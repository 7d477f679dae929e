-- Give up a waiter's claim on the next turn (it timed out or was cancelled).
-- KEYS[1] claim key; ARGV[1] token
-- Returns 1 when the claim was ours and is deleted, else 0.
local claim = redis.call('GET', KEYS[1])
if claim and string.sub(claim, 1, #ARGV[1] + 1) == ARGV[1] .. ':' then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
