-- Compare-and-set of one SKU's stock, recording its idempotency key.
-- KEYS[1]: the stock key. KEYS[2]: the SKU's write marker, naming the call
-- that wrote last. KEYS[3], if given: the idempotency key.
-- ARGV[1]: the stock that was read (it is the version). ARGV[2]: the new
-- stock. ARGV[3]: how long to keep the idempotency key and the marker, in
-- milliseconds. ARGV[4]: a token unique to the call.
-- Returns 1 when written (or when this very call wrote already: its reply
-- was lost and the client sent it again), 0 when the stock moved (or is
-- gone), -1 when the idempotency key is already recorded. Stock values are
-- compared as numbers, exact up to 2^53.
if redis.call('GET', KEYS[2]) == ARGV[4] then
  return 1
end
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then
  return -1
end
local cur = redis.call('GET', KEYS[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[3])
if KEYS[3] then
  redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
end
return 1
