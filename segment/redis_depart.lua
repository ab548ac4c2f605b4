-- The source's first step of a transfer (package segment, Redis): takes
-- up to ARGV[1] units of the segment's a into its o, and records the
-- transfer as the field i:ID = "units destination time" until its
-- destination's decision is settled here (redis_settle.lua). The units
-- stay counted in the SKU's stock (a + o) meanwhile.
-- KEYS[1]  the segment
-- ARGV[1]  the units wanted; ARGV[2] the transfer's id; ARGV[3] the
--          destination segment's number; ARGV[4] the time, in ms
-- Returns the units taken: 0 when the segment has none (or is absent).
local numfmt = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f'
local a = tonumber(redis.call('HGET', KEYS[1], 'a'))
if not a or a <= 0 then
  return 0
end
local x = string.format(numfmt, math.min(a, tonumber(ARGV[1])))
redis.call('HINCRBY', KEYS[1], 'a', '-' .. x)
redis.call('HINCRBY', KEYS[1], 'o', x)
redis.call('HSET', KEYS[1], 'i:' .. ARGV[2], x .. ' ' .. ARGV[3] .. ' ' .. ARGV[4])
return tonumber(x)
