-- Init of one segment (package segment, Redis): a = ARGV[1], no units out
-- and no transfers; v, the count of adds, goes on from where it was, and
-- so do the segment's held lines (h, m: redis_holds.lua), which Init does
-- not move.
-- KEYS[1]  the segment
local p = redis.call('HMGET', KEYS[1], 'v', 'h', 'm')
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'a', ARGV[1], 'o', 0, 'v', string.format('%d', (tonumber(p[1]) or 0) + 1))
if p[2] then
  redis.call('HSET', KEYS[1], 'h', p[2])
end
if p[3] then
  redis.call('HSET', KEYS[1], 'm', p[3])
end
return 1
