-- Takes an excess out of one SKU's Redis allotment (Reconcile), as a
-- script so that go-redis never sends it twice (rediskeys.Script).
-- KEYS[1]  the SKU's state hash (see move.lua)
-- ARGV[1]  the generation the excess was found in
-- ARGV[2]  the change, negative
-- Returns the new allotment, or false when the generation moved on.
if redis.call('HGET', KEYS[1], 'n') ~= ARGV[1] then
  return false
end
return redis.call('HINCRBY', KEYS[1], 'a', ARGV[2])
