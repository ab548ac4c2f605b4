-- Frees the lock KEYS[1] if token ARGV[1] holds it, and wakes the waiters
-- with a message on the channel named like the key.
-- Returns 1 when freed, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', KEYS[1], '')
  return 1
end
return 0
