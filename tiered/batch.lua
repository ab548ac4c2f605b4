-- Moves the Redis-held stock of several calls (Reduce or Return) at once,
-- as if each ran move.lua on its own, in order within each SKU, and
-- journals the moves, in one atomic step: the calls merged into one script
-- call (see merge.go). Every key is in one Cluster slot. The calls come
-- grouped by SKU (calls of different SKUs do not meet), in their order
-- within each; a call's position is its place in that sequence, from 1.
-- KEYS     per SKU, its state hash (see move.lua), its journal stream, then
--          the records of its keyed calls' idempotency keys, in order
-- ARGV[1]  low-water mark: below it a Reduce asks for a refill
-- ARGV[2]  how long a refill request stands before another may be asked, ms
-- ARGV[3]  how long to keep a key's record, ms
-- ARGV[4]  with LEDGER only: r, the index before the calls' ledger
--          records: the record of the call at position i is ARGV[r + i]
--          (see holds.lua), and the SKUs' items end at ARGV[r]
-- then per SKU m, the number of its items, and m items of two values, c
-- and q: c > 0 is a run of c unkeyed calls that each take q units (q > 0
-- for a Reduce, -q for a Return); c = 0 is one keyed call that takes q, its
-- record the SKU's next in KEYS.
-- Returns, per SKU in order, its remaining stock before its calls (0 when
-- code 3 or 5 below answers them all); then four values per call whose
-- reply is not a plain move, in no set order: its position, a code and two
-- values, as move.lua's replies:
--   0 moved, and this call asks for a refill (the last Reduce of its SKU in
--     the batch, when the allotment ends below the low-water mark and no
--     refill request stands): the remaining stock, g
--   1 refused (fewer units than asked, or a Return past MaxStock): the
--     remaining stock, 0
--   2 the allotment is short but SQL may have units: g, the allotment
--   3 Redis has no state for the SKU: 0, 0
--   4 the key's record says an earlier call took effect: the record, 0
--   5 the state key is not a hash: 0, 0
-- Every other call moved, with no refill asked: its remaining stock is the
-- SKU's before its calls less the units taken by the SKU's calls that
-- moved, up to and including it (merge.go counts it so).
-- The moves of each SKU are journaled as one entry with its allotment,
-- written once: n the generation, d the net units taken (sold less
-- returned) and s the units sold (Reduces), so the units returned are
-- s - d (move.lua's entries have no s: d > 0 sold, d < 0 returned), and,
-- when some of its calls were keyed and moved, k: their keys (keyitem in
-- holds.lua).
-- Numbers written are formatted with %.0f, so they stay exact; numbers
-- replied are integer replies (exact: at most MaxStock).
local lw, rto, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local max = 9007199254740991
local out, nout, ex, nex = {}, 0, {}, 0
local i, j, k = 0, 4, 0 -- the call's position, ARGV's next, KEYS' last
local recs, last_arg = 0, #ARGV
if LEDGER then
  recs, j = tonumber(ARGV[4]), 5
  last_arg = recs
end
local moved -- with LEDGER: the positions of the SKU's calls that moved
local now
local a, p, g, sold, last, lastv -- the SKU's, as its calls move
local keyed -- the SKU's keyed moves, as its calls move (keyitem)

local function except(code, v, w)
  ex[nex + 1], ex[nex + 2], ex[nex + 3], ex[nex + 4] = i, code, v, w
  nex = nex + 4
end

-- step moves one call of q units, with its record rec when keyed.
local function step(q, rec)
  local fits = false
  if q > 0 then
    if q <= a then
      fits = true
    elseif q > a + p then
      if not rec then
        return except(1, a + p, 0)
      end
    elseif not rec then
      return except(2, g, a)
    end
  else
    fits = -q <= max - a - p
    if not fits and not rec then
      return except(1, a + p, 0)
    end
  end
  if rec then
    local first
    if fits then -- record the call unless an earlier one did, in one command
      first = redis.call('SET', rec, string.format('%.0f', a - q + p), 'NX', 'GET', 'PX', ttl)
    else
      first = redis.call('GET', rec)
    end
    if first then
      return except(4, first, 0)
    end
    if not fits then
      if q > 0 and q <= a + p then
        return except(2, g, a)
      end
      return except(1, a + p, 0)
    end
  end
  a = a - q
  if q > 0 then
    sold, last, lastv = sold + q, i, a + p
  end
  if LEDGER then
    moved[#moved + 1] = i
  end
  if rec then
    keyed[#keyed + 1] = keyitem(rec, q, a + p)
  end
end

while j <= last_arg do
  local m = tonumber(ARGV[j])
  local state, journal = KEYS[k + 1], KEYS[k + 2]
  k = k + 2
  local h = redis.pcall('HMGET', state, 'a', 'p', 'n', 'g', 'r', 'x')
  local bad = (h.err and 5) or (not h[1] and 3) or nil
  if not bad and h[6] then -- release the SKU's expired holds first (holds.lua)
    now = now or hnow()
    if release_due(state, journal, now) > 0 then
      h = redis.call('HMGET', state, 'a', 'p', 'n', 'g', 'r', 'x')
    end
  end
  nout = nout + 1
  if bad then
    out[nout] = 0
    for t = j + 1, j + 2 * m, 2 do
      local c = tonumber(ARGV[t])
      if c == 0 then
        c, k = 1, k + 1
      end
      for _ = 1, c do
        i = i + 1
        except(bad, 0, 0)
      end
    end
  else
    a, p, g, sold, last, keyed, moved = tonumber(h[1]), tonumber(h[2]), h[4], 0, 0, {}, {}
    local a0 = a
    out[nout] = a + p
    for t = j + 1, j + 2 * m, 2 do
      local c, q = tonumber(ARGV[t]), tonumber(ARGV[t + 1])
      if c == 0 then
        i, k = i + 1, k + 1
        step(q, KEYS[k])
      elseif (q > 0 and c * q <= a) or (q < 0 and -c * q <= max - a - p) then
        -- every call of the run fits: they move at once
        a, i = a - c * q, i + c
        if LEDGER then
          for x = i - c + 1, i do
            moved[#moved + 1] = x
          end
        end
        if q > 0 then
          sold, last, lastv = sold + c * q, i, a + p
        end
      else
        for _ = 1, c do
          i = i + 1
          step(q)
        end
      end
    end
    if a ~= a0 or sold > 0 then
      local refill = false
      if last > 0 and a < lw and p > 0 then
        if not now then
          local t = redis.call('TIME')
          now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
        end
        refill = not h[5] or now - tonumber(h[5]) >= rto
      end
      if refill then
        redis.call('HSET', state, 'a', string.format('%.0f', a), 'r', string.format('%.0f', now))
        local save = i
        i = last
        except(0, lastv, g)
        i = save
      else
        redis.call('HSET', state, 'a', string.format('%.0f', a))
      end
      local entry = {'n', h[3], 'd', string.format('%.0f', a0 - a), 's', string.format('%.0f', sold)}
      if #keyed > 0 then
        entry[7], entry[8] = 'k', table.concat(keyed, '\n')
      end
      if LEDGER then
        local l = {}
        for x = 1, #moved do
          l[x] = ARGV[recs + moved[x]]
        end
        entry[#entry + 1], entry[#entry + 2] = 'l', table.concat(l, '\n')
      end
      redis.call('XADD', journal, '*', unpack(entry))
    end
  end
  j = j + 1 + 2 * m
end
for t = 1, nex do
  out[nout + t] = ex[t]
end
return out
