-- Init of one segment (package segment, Redis): a = ARGV[1], no units out
-- and no transfers; v, the count of adds, goes on from where it was.
-- KEYS[1]  the segment
local v = tonumber(redis.call('HGET', KEYS[1], 'v')) or 0
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'a', ARGV[1], 'o', 0, 'v', string.format('%d', v + 1))
return 1
