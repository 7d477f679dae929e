-- Acquire a lock: bump the fence counter and SET the token with its fence and
-- holder description (held.lua), atomically; with a claim key, the longest waiter
-- goes first.
-- KEYS[1] lock key (string: '<token>RS<fence>RS<holder>', held.lua)
-- KEYS[2] fence counter (integer, no TTL: it must never go back)
-- KEYS[3] holder metadata of a key an older release wrote (hash: fence, holder; same
--         TTL as the lock): read, and renewed with such a key, never written
-- KEYS[4] optional claim of the longest waiter on the next turn, short TTL:
--         "token:waited_ms:ttl_ms:fencing[/wake]:holder" (what release.lua needs to
--         hand the lock straight to it)
-- KEYS[5] optional line of the waiters behind the claimant (line.lua): a refused
--         waiter takes a place in it, which release.lua hands the next turn to
-- ARGV[1] token, ARGV[2] TTL in ms, ARGV[3] '1' to bump the fence, '0' not to,
-- ARGV[4] holder description, ARGV[5] ms this caller has waited so far,
-- ARGV[6] claim TTL in ms, ARGV[7] optional wake id of the caller's process: its claim
-- names it ("token:waited_ms:ttl_ms:fencing/wake:holder"), and the release that hands
-- the lock over publishes on that process's wake channel, not the lock's
-- Returns {1, fence} when acquired (fence 0 without fencing), or
-- {0, ms, now_ms[, token, fence, holder]} with how long the caller may sleep
-- before the next attempt (the holder's remaining TTL, or the remaining life of
-- a longer waiter's claim), the server's clock (TIME, in ms; -1 without a claim
-- key or where the ACL refuses TIME): a waiter compares it with the time a
-- release handed the lock to it (release.lua), to tell a live hand-off from a
-- stale one; and, when someone holds the lock, who: its token, fence and holder
-- description ('' when unknown), so a busy caller needs no second call to say who.
local value = redis.call('GET', KEYS[1])
local current = held_token(value)
if current == ARGV[1] then
  -- Our own token is already there: a retried call whose first reply was lost (or a
  -- hand-off by an older release, which wrote the bare token and the metadata beside it:
  -- metadata first, it must never outlive the lock key).
  if value == current then
    redis.call('PEXPIRE', KEYS[3], ARGV[2])
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  local fence = held_fields(value, KEYS[3])
  return {1, tonumber(fence) or 0}
end
local waited = tonumber(ARGV[5] or '0')
local claimant, claimed, claim = nil, -1, nil
if KEYS[4] then
  claim = redis.call('GET', KEYS[4])
  if claim then
    local who, how_long = string.match(claim, '^([^:]+):(%d+):')
    claimant, claimed = who, tonumber(how_long)
    -- It had waited that long when it wrote the claim; it has waited since, too (else a
    -- waiter that came later but wrote last would take its turn).
    local left = redis.call('PTTL', KEYS[4])
    if left > 0 then
      claimed = claimed + math.max(0, tonumber(ARGV[6]) - left)
    end
  end
end
if current or (claimant and claimant ~= ARGV[1] and claimed > waited) then
  -- Only a waiter with a claim key can be handed the lock.
  local now_ms = KEYS[4] and line_clock() or -1
  local line = now_ms >= 0 and KEYS[5]
  -- Held, or a longer waiter has the next turn. The longest waiter claims it; the
  -- others take a place in the line behind it.
  if KEYS[4] and waited > 0 then
    local wake = (ARGV[7] and ARGV[7] ~= '') and ('/' .. ARGV[7]) or ''
    local mine = ARGV[1] .. ':' .. waited .. ':' .. ARGV[2] .. ':' .. ARGV[3] .. wake .. ':'
      .. ARGV[4]
    if claimant == nil or claimant == ARGV[1] or waited > claimed then
      if line then
        if claimant and claimant ~= ARGV[1] then  -- displaced: it goes next
          local left = redis.call('PTTL', KEYS[4])
          line_place(KEYS[5], now_ms, claimant, claim, left > 0 and left or ARGV[6], true)
        end
        line_leave(KEYS[5], now_ms, ARGV[1])
      end
      redis.call('SET', KEYS[4], mine, 'PX', ARGV[6])
    elseif line then
      line_place(KEYS[5], now_ms, ARGV[1], mine, ARGV[6], false)
    end
  end
  local wait = redis.call('PTTL', current and KEYS[1] or KEYS[4])
  if not current then
    return {0, wait, now_ms}
  end
  local fence, holder = held_fields(value, KEYS[3])
  return {0, wait, now_ms, current, fence, holder}
end
if claimant == ARGV[1] then
  redis.call('DEL', KEYS[4])
end
if KEYS[5] and waited > 0 then  -- a waiter got it: its place in the line goes
  local now_ms = line_clock()
  if now_ms >= 0 then
    line_leave(KEYS[5], now_ms, ARGV[1])
  end
end
local fence = 0
if ARGV[3] == '1' then
  fence = redis.call('INCR', KEYS[2])
end
redis.call('SET', KEYS[1], held_value(ARGV[1], fence, ARGV[4]), 'PX', ARGV[2])
return {1, fence}
