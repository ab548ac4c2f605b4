-- Applies SQL's grants of one SKU to its Redis allotment, each grant once.
-- KEYS[1]  the SKU's state hash (see move.lua)
-- ARGV[1]  the generation of the grants
-- ARGV[2]  SQL's last grant id when the list was read
-- ARGV[3]  SQL's unallotted units when the list was read
-- ARGV[4..] pairs of grant id and units, ascending and contiguous
-- Grant ids of one generation run 1, 2, 3...; Redis keeps the last one it
-- applied (g) and applies only g+1 next, so a grant applies once whatever
-- repeats or overtakes its call. p is set to SQL's figure only when Redis
-- then holds every grant SQL had made; otherwise it drops by each grant.
-- Returns g after applying; -1 when Redis has no state or an older
-- generation (warm up first); -2 when Redis holds a newer generation; -3
-- when the list starts past g + 1 (its caller saw a grant id of an older
-- generation, say): nothing applied, list the generation's grants again.
local h = redis.call('HMGET', KEYS[1], 'n', 'g')
if not h[1] then
  return -1
end
local n, gen = tonumber(h[1]), tonumber(ARGV[1])
if n < gen then
  return -1
elseif n > gen then
  return -2
end
local g = tonumber(h[2])
for i = 4, #ARGV, 2 do
  local id = tonumber(ARGV[i])
  if id == g + 1 then
    redis.call('HINCRBY', KEYS[1], 'a', ARGV[i + 1])
    redis.call('HINCRBY', KEYS[1], 'p', '-' .. ARGV[i + 1])
    g = id
  elseif id > g + 1 then
    return -3 -- a gap: the caller listed grants after an id Redis has not reached
  end
end
redis.call('HSET', KEYS[1], 'g', string.format('%.0f', g))
if g == tonumber(ARGV[2]) then
  redis.call('HSET', KEYS[1], 'p', ARGV[3])
end
redis.call('HDEL', KEYS[1], 'r')
return g
