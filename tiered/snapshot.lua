-- Reads one SKU's Redis state and its journal's entries, at one instant.
-- KEYS[1]  the SKU's state hash (see move.lua)
-- KEYS[2]  the SKU's journal stream
-- ARGV[1]  the most entries to return
-- Returns {a, p, n, g, count, id1, n1, d1, id2, n2, d2, ...}: the hash's
-- fields (nil when absent), the stream's length, then its first entries
-- (id, generation, units taken).
local h = redis.call('HMGET', KEYS[1], 'a', 'p', 'n', 'g')
local out = {h[1] or false, h[2] or false, h[3] or false, h[4] or false, redis.call('XLEN', KEYS[2])}
for _, e in ipairs(redis.call('XRANGE', KEYS[2], '-', '+', 'COUNT', ARGV[1])) do
  local n, d = '0', '0'
  local f = e[2]
  for i = 1, #f, 2 do
    if f[i] == 'n' then n = f[i + 1] elseif f[i] == 'd' then d = f[i + 1] end
  end
  out[#out + 1] = e[1]
  out[#out + 1] = n
  out[#out + 1] = d
end
return out
