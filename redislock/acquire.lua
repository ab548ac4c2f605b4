-- Takes the lock KEYS[1] for token ARGV[1] for ARGV[2] milliseconds.
-- Returns -1 when taken, also when the token holds it already (the client
-- sent this again after losing the reply, or a release handed it over);
-- otherwise how many milliseconds the holder's lock has left (0 when it
-- has no expiry).
--
-- With a member ARGV[3] (TOKEN TTL CHANNEL), a caller that finds the lock
-- held joins the waiters' queue KEYS[2], in arrival order (a place it
-- keeps when it asks again), and the queue lives ARGV[4] milliseconds past
-- the last such call; release.lua hands the lock to the queue's head. A
-- caller that takes the lock leaves the queue.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if ARGV[3] then
    redis.call('ZREM', KEYS[2], ARGV[3])
  end
  return -1
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return -1
end
if ARGV[3] then
  if not redis.call('ZSCORE', KEYS[2], ARGV[3]) then
    local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
    local score = 1
    if last[2] then
      score = tonumber(last[2]) + 1
    end
    redis.call('ZADD', KEYS[2], score, ARGV[3])
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return math.max(redis.call('PTTL', KEYS[1]), 0)
