-- Compare-and-set of one SKU's stock, recording its idempotency key.
-- KEYS[1]: the stock key. KEYS[2], when ARGV[4] is "key": the idempotency
-- key.
-- ARGV[1]: the stock that was read (it is the version). ARGV[2]: the new
-- stock. ARGV[3]: how long to keep the idempotency key, in milliseconds.
-- ARGV[4]: "none" or "key".
-- Returns 1 when written, 0 when the stock moved (or is gone), -1 when the
-- idempotency key is already recorded. A call is never sent twice (see
-- internal/rediskeys.Script), so a recorded key is always another call's.
-- Stock values are compared as numbers, exact up to 2^53, and written as
-- given.
local keyed = ARGV[4] == 'key'
if keyed and redis.call('EXISTS', KEYS[2]) == 1 then
  return -1
end
local cur = redis.call('GET', KEYS[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
if keyed then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
end
return 1
