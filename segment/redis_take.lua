-- Reduces and Returns on one segment of a SKU (package segment, Redis):
-- one call, or several merged (redis_merge.go), applied in order in one
-- atomic step.
-- A segment is a hash: a the units available, o the units out in
-- transfers not yet settled, v how many times units were added (Return,
-- Init), and i:ID per transfer out (redis_depart.lua).
-- KEYS[1]  the segment
-- KEYS[2..] the records of the calls' idempotency keys
-- ARGV[1]  the units (a + o) of the SKU's other segments, as the caller
--          read them just before
-- ARGV[2]  how long to keep a record, in ms
-- then per call two values: its signed quantity (n takes n units, a
-- Reduce; -n gives n back, a Return) and the index in KEYS of its key's
-- record, 0 for none
-- Returns {code, value} per call, in order:
--   0 moved; the remaining: this segment's a + o after it, plus ARGV[1]
--   1 the segment cannot fit the Reduce; its a
--   2 no such segment (the SKU was never initialised)
--   3 the key's record says an earlier call took effect; its remaining
--   4 the Return would pass MaxStock; the SKU's stock as read
-- Numbers are formatted with %d where C's long has 64 bits, %.0f
-- elsewhere (as in luascript's move.lua), so they stay exact.
local numfmt = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f'
local seg = redis.call('HMGET', KEYS[1], 'a', 'o')
local a, o = tonumber(seg[1]), tonumber(seg[2]) or 0
local others = tonumber(ARGV[1])
local start, adds, out = a, 0, {}
for i = 3, #ARGV, 2 do
  local q, k = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
  local code, val = 0, 0
  local first = k > 0 and redis.call('GET', KEYS[k])
  if first then
    code, val = 3, tonumber(string.match(first, '^%d+'))
  elseif not a then
    code = 2
  elseif q > a then
    code, val = 1, a
  elseif -q > 9007199254740991 - a - o - others then
    code, val = 4, a + o + others
  else
    a = a - q
    val = a + o + others
    if q < 0 then
      adds = adds + 1
    end
    if k > 0 then
      redis.call('SET', KEYS[k], string.format(numfmt, val), 'PX', ARGV[2])
    end
  end
  out[#out + 1] = code
  out[#out + 1] = val
end
if a and a ~= start then
  redis.call('HINCRBY', KEYS[1], 'a', string.format(numfmt, a - start))
end
if adds > 0 then
  redis.call('HINCRBY', KEYS[1], 'v', adds)
end
return out
