-- Release a lock only if it still holds our token, and wake the waiters.
-- With a claim (the longest waiter's, see acquire.lua) the lock is handed
-- straight to that waiter: it learns it holds the lock from the message, with
-- no round trip of its own.
-- With a line of waiters behind the claimant (line.lua), the first of them
-- becomes the claimant of the turn after, and with no claim the first is handed
-- the lock: every release of a lock others wait for is a hand-off.
-- KEYS[1] lock key (held.lua), KEYS[2] holder metadata of an older release's key (deleted),
-- KEYS[3] optional claim ("token:waited:ttl_ms:fencing[/wake]:holder"), KEYS[4] fence counter,
-- KEYS[5] optional line
-- ARGV[1] token, ARGV[2] release channel, ARGV[3] claim TTL in ms (with KEYS[5])
-- Publishes WAKE_FREE (free: the longest waiter tries again; not for a lock with a
-- line that nobody is in: each of its waiters has a claim or a place, or will retry
-- once subscribed, see attempts.py) or
-- WAKE_HANDED_TO .. '<token>:<fence>:<ms>' (on the heir's process's wake channel,
-- P:wake:<id>, when its claim names one; handed to that waiter at the server's
-- clock <ms>, TIME in ms: the handed key expires at <ms> + its TTL, which the waiter
-- checks against the clock reading of its last refused attempt, see acquire.lua;
-- ':<ms>' is left out where the ACL refuses TIME).
-- The WAKE_* names are defined from django_redislock/wakeups.py when the script is loaded.
-- Returns 1 when released, 0 when the lock is not ours (expired or re-taken).
local value = redis.call('GET', KEYS[1])
if held_token(value) ~= ARGV[1] then
  return 0
end
if value == ARGV[1] then
  redis.call('DEL', KEYS[2])  -- a bare token: an older build's metadata beside it
end
local claim = KEYS[3] and redis.call('GET', KEYS[3])
local claimed = claim
-- Without it (ACL) there is no line, and the heir confirms the hand-off with an attempt.
local now_ms = (claim or KEYS[5]) and line_clock() or -1
local line = now_ms >= 0 and KEYS[5]
if line and not claim then
  claim = line_pop(KEYS[5], now_ms)
end
if claim then
  local heir, ttl, fencing, wake, holder =
    string.match(claim, '^([^:]+):%d+:(%d+):([01])/?(%w*):(.*)$')
  if heir then
    local fence = 0
    if fencing == '1' then
      fence = redis.call('INCR', KEYS[4])
    end
    redis.call('SET', KEYS[1], held_value(heir, fence, holder), 'PX', ttl)
    -- The next claim lives what its place had left, not a fresh ARGV[3]: a dead
    -- waiter's claim must not hold the turn after the one it was handed.
    local next_claim, left = nil, 0
    if line then
      next_claim, left = line_pop(KEYS[5], now_ms)
    end
    if next_claim then
      redis.call('SET', KEYS[3], next_claim, 'PX', math.min(left, tonumber(ARGV[3])))
    elseif claimed then
      redis.call('DEL', KEYS[3])
    end
    local at = ''
    if now_ms >= 0 then
      at = ':' .. now_ms
    end
    -- Only the heir's process listens on its wake channel (under the key prefix).
    local prefix = wake ~= '' and string.match(ARGV[2], '^(.-):{')
    local channel = prefix and (prefix .. ':wake:' .. wake) or ARGV[2]
    redis.call('PUBLISH', channel, WAKE_HANDED_TO .. heir .. ':' .. fence .. at)
    return 1
  end
end
redis.call('DEL', KEYS[1])
if line and not claim then
  return 1  -- nobody in line: nobody to wake
end
redis.call('PUBLISH', ARGV[2], WAKE_FREE)
return 1
