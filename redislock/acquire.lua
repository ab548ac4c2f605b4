-- Takes the lock KEYS[1] for token ARGV[1] for ARGV[2] milliseconds.
-- Returns -1 when taken, also when the token holds it already (the client
-- sent this again after losing the reply); otherwise how many milliseconds
-- the holder's lock has left (0 when it has no expiry).
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return -1
end
return math.max(redis.call('PTTL', KEYS[1]), 0)
