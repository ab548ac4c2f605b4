-- Extends the lock KEYS[1] to ARGV[2] milliseconds if token ARGV[1] holds it.
-- Returns 1 when extended, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
