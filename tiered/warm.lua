-- Loads one SKU's state from SQL into Redis, fenced by generation: it
-- writes only when Redis has no state for the SKU or an older generation,
-- so a late or repeated warm-up never overwrites newer Redis state. The
-- allotment starts empty: units reach Redis only through grants.
-- KEYS[1]  the SKU's state hash (see move.lua)
-- KEYS[2]  the SKU's journal stream
-- ARGV[1]  SQL's generation
-- ARGV[2]  SQL's last grant id
-- ARGV[3]  SQL's unallotted units
-- ARGV[4]  the syncers' consumer group
-- Returns 1 when it wrote, 0 when Redis was as new or newer.
local n = tonumber(redis.call('HGET', KEYS[1], 'n'))
if n and n >= tonumber(ARGV[1]) then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'a', '0', 'p', ARGV[3], 'n', ARGV[1], 'g', ARGV[2])
redis.pcall('XGROUP', 'CREATE', KEYS[2], ARGV[4], '0', 'MKSTREAM')
return 1
