-- Append a batch of lock events to the history stream (django_redislock/history.py), in
-- one call: one entry per event, trimmed by count as it goes and by age once.
-- KEYS[1] the stream
-- ARGV[1] MAXLEN (approximate: whole stream nodes are trimmed), ARGV[2] the oldest id
-- to keep (ms: older entries are trimmed, exactly), ARGV[3..] one packed event each
-- Returns the number of entries added.
for i = 3, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'd', ARGV[i])
end
redis.call('XTRIM', KEYS[1], 'MINID', ARGV[2])
return #ARGV - 2
