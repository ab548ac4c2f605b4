-- Reduces and Returns on one segment of a SKU (package segment, Redis):
-- one call, or several merged (redis_merge.go), applied in order in one
-- atomic step (after redis_holds.lua). Held lines of the segment that
-- fell due are released first.
-- A segment is a hash: a the units available, o the units out in
-- transfers not yet settled, v how many times units were added (Return,
-- Init), and i:ID per transfer out (redis_depart.lua).
-- KEYS[1]  the segment
-- KEYS[2..] the records of the calls' idempotency keys
-- ARGV[1]  the units (a + o) of the SKU's other segments, as the caller
--          read them just before
-- ARGV[2]  how long to keep a record, in ms
-- then per call three values: its signed quantity (n takes n units, a
-- Reduce; -n gives n back, a Return), the index in KEYS of its key's
-- record, 0 for none, and, for a line of an order, how long it is held
-- in ms when above 0, or, below 0, how long to keep its record (ms,
-- negated); 0 for a buyer's call
-- Returns {code, value} per call, in order:
--   0 moved; the remaining: this segment's a + o after it, plus ARGV[1]
--   1 the segment cannot fit the Reduce; its a
--   2 no such segment (the SKU was never initialised)
--   3 the key's record says an earlier call took effect; its remaining
--   4 the Return would pass MaxStock; the SKU's stock as read
-- Numbers are formatted with numfmt (redis_holds.lua), so they stay exact.
local seg = redis.call('HMGET', KEYS[1], 'a', 'o', 'm')
local now
if seg[3] then
  now = now_ms()
  if tonumber(seg[3]) <= now then
    release_due(KEYS[1], holds_key(KEYS[1]), now, ARGV[2])
    seg = redis.call('HMGET', KEYS[1], 'a', 'o')
  end
end
local a, o = tonumber(seg[1]), tonumber(seg[2]) or 0
local others = tonumber(ARGV[1])
local start, adds, out = a, 0, {}
for i = 3, #ARGV, 3 do
  local q, k, hold = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
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
    if hold > 0 then
      now = now or now_ms()
      hold_line(KEYS[1], holds_key(KEYS[1]), KEYS[k], val, q, hold, now)
    elseif k > 0 then
      redis.call('SET', KEYS[k], string.format(numfmt, val), 'PX', hold < 0 and -hold or ARGV[2])
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
