-- The Redis type of a lock's main key: which kind of lock holds the name.
-- KEYS[1] the lock's main key (P:{N})
-- Returns the type's name ('string', 'zset', 'hash'...), or 'none' when the key is absent.
return redis.call('TYPE', KEYS[1])['ok']
