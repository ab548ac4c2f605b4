-- Moves the Redis-held stock of several calls (Reduce or Return) at once,
-- in order, as if each ran move.lua on its own, and journals each move, in
-- one atomic step: the calls merged into one script call (see merge.go).
-- Every key is in one Cluster slot.
-- KEYS     per SKU of the calls, its state hash (see move.lua) followed by
--          its journal stream; then the records of the calls' idempotency
--          keys
-- ARGV[1]  low-water mark: below it a Reduce asks for a refill
-- ARGV[2]  how long a refill request stands before another may be asked, ms
-- ARGV[3]  how long to keep a key's record, ms
-- then per call three values: the index in KEYS of its SKU's state hash,
-- the units it takes (q > 0 for a Reduce, -q for a Return) and the index in
-- KEYS of its key's record, 0 for none.
-- Returns three values per call, in order: a code and two values, as
-- move.lua's replies:
--   0 moved: the remaining stock, and -1, or g when this call asks for a
--     refill (the last Reduce of its SKU in the batch, when the allotment
--     ends below the low-water mark and no refill request stands)
--   1 refused (fewer units than asked, or a Return past MaxStock): the
--     remaining stock, 0
--   2 the allotment is short but SQL may have units: g, the allotment
--   3 Redis has no state for the SKU: 0, 0
--   4 the key's record says an earlier call took effect: the record, 0
--   5 the state key is not a hash: 0, 0
-- The moves of each SKU are journaled as one entry, appended at the end with
-- its allotment, written once: n the generation, d the net units taken
-- (sold less returned) and s the units sold (Reduces), so the units
-- returned are s - d (move.lua's entries have no s: d > 0 sold, d < 0
-- returned). Numbers written are formatted with %.0f, so they stay exact;
-- the remaining stock a call gets back is a number (an integer reply: exact,
-- as it is at most MaxStock), not formatted per call.
local lw, rto, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local st, order, out, o = {}, {}, {}, 0
for i = 4, #ARGV, 3 do
  local s, q, k = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local x = st[s]
  if x == nil then -- the SKU's first call in the batch
    local h = redis.pcall('HMGET', KEYS[s], 'a', 'p', 'n', 'g', 'r')
    if h.err then
      x = 5
    elseif not h[1] then
      x = 3
    else
      local a = tonumber(h[1])
      x = {a = a, a0 = a, p = tonumber(h[2]), n = h[3], g = h[4], r = h[5], last = 0, s = 0}
    end
    st[s] = x
    order[#order + 1] = s
  end
  local code, v, w = 0, 0, -1
  if type(x) == 'number' then
    code, w = x, 0
  else
    local a, p = x.a, x.p
    local fits = false
    if q > 0 then
      if q <= a then
        fits = true
      elseif q > a + p then
        code, v, w = 1, a + p, 0
      else
        code, v, w = 2, x.g, a
      end
    elseif -q > 9007199254740991 - a - p then
      code, v, w = 1, a + p, 0
    else
      fits = true
    end
    local first
    if k > 0 then
      if fits then -- record the call unless an earlier one did, in one command
        first = redis.call('SET', KEYS[k], string.format('%.0f', a - q + p), 'NX', 'GET', 'PX', ttl)
      else
        first = redis.call('GET', KEYS[k])
      end
    end
    if first then
      code, v, w = 4, first, 0
    elseif fits then
      a = a - q
      x.a, v = a, a + p
      if q > 0 then
        x.s = x.s + q
        x.last = o + 3 -- this call's third value
      end
    end
  end
  out[o + 1], out[o + 2], out[o + 3] = code, v, w
  o = o + 3
end
local now
for _, s in ipairs(order) do
  local x = st[s]
  if type(x) == 'table' and (x.a ~= x.a0 or x.s > 0) then
    redis.call('HSET', KEYS[s], 'a', string.format('%.0f', x.a))
    redis.call('XADD', KEYS[s + 1], '*', 'n', x.n, 'd', string.format('%.0f', x.a0 - x.a), 's', string.format('%.0f', x.s))
    if x.last > 0 and x.a < lw and x.p > 0 then
      if not now then
        local t = redis.call('TIME')
        now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      end
      if not x.r or now - tonumber(x.r) >= rto then
        redis.call('HSET', KEYS[s], 'r', string.format('%.0f', now))
        out[x.last] = x.g
      end
    end
  end
end
return out
