-- The source's last step of transfers (package segment, Redis): removes
-- each transfer named, its units leaving o: back into a when its
-- destination aborted it, for good when the destination applied them. A
-- transfer settled already is skipped, so settling twice changes nothing.
-- KEYS[1]  the segment
-- ARGV     pairs: a transfer's id and its decision, 'c' or 'x'
-- Returns how many transfers it settled.
local n = 0
for i = 1, #ARGV, 2 do
  local field = 'i:' .. ARGV[i]
  local rec = redis.call('HGET', KEYS[1], field)
  if rec then
    local x = string.match(rec, '^%d+')
    redis.call('HDEL', KEYS[1], field)
    redis.call('HINCRBY', KEYS[1], 'o', '-' .. x)
    if ARGV[i + 1] == 'x' then
      redis.call('HINCRBY', KEYS[1], 'a', x)
    end
    n = n + 1
  end
end
return n
