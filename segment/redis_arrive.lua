-- The destination's step of a borrowing Reduce (package segment, Redis):
-- decides, once and for all, each transfer sent to this segment for the
-- call, and applies the call with their units, all or nothing. A transfer
-- that was decided already (a recovery aborted it) keeps its decision,
-- and its units are not used.
-- KEYS[1]  the segment
-- KEYS[2]  the record of the call's idempotency key; KEYS[1] when unkeyed
-- KEYS[3..] the decision of each transfer
-- ARGV[1]  the quantity
-- ARGV[2]  the units of the other segments once the transfers applied
-- ARGV[3]  how long to keep the record and the decisions, in ms
-- ARGV[4]  as redis_take.lua's third value of a call: how long a line
--          of an order is held (above 0) or its record kept (below 0)
-- ARGV[5..] the units of each transfer, in the order of KEYS[3..]
-- Returns {code, value, the decision of each transfer}: code and value
-- as redis_take.lua's (1: the segment with the transfers cannot fit the
-- call, and their units); a decision is 'c' (applied: the call took the
-- units) or 'x' (aborted: they go back to their source). After
-- redis_holds.lua.
local keyed = KEYS[2] ~= KEYS[1]
local first = keyed and redis.call('GET', KEYS[2])
local seg = redis.call('HMGET', KEYS[1], 'a', 'o')
local a, o = tonumber(seg[1]), tonumber(seg[2]) or 0
local got, open = 0, {}
for j = 3, #KEYS do
  if redis.call('EXISTS', KEYS[j]) == 0 then
    open[j] = true
    got = got + tonumber(ARGV[j + 2])
  end
end
local q = tonumber(ARGV[1])
local code, val = 0, 0
if first then
  code, val = 3, tonumber(string.match(first, '^%d+'))
elseif not a then
  code = 2
elseif a + got < q then
  code, val = 1, a + got
else
  a = redis.call('HINCRBY', KEYS[1], 'a', string.format(numfmt, got - q))
  val = a + o + tonumber(ARGV[2])
  if keyed and tonumber(ARGV[4]) > 0 then
    hold_line(KEYS[1], holds_key(KEYS[1]), KEYS[2], val, q, tonumber(ARGV[4]), now_ms())
  elseif keyed then
    local hold = tonumber(ARGV[4])
    redis.call('SET', KEYS[2], string.format(numfmt, val), 'PX', hold < 0 and -hold or ARGV[3])
  end
end
local out = {code, val}
for j = 3, #KEYS do
  local d = 'x'
  if open[j] then
    if code == 0 then
      d = 'c'
    end
    redis.call('SET', KEYS[j], d, 'PX', ARGV[3])
  end
  out[#out + 1] = d
end
return out
