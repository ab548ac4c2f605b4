-- Moves the stock of several calls at once, in order, as if each ran
-- move.lua on its own, in one atomic step: the calls merged into one
-- script call (see merge.go). Every key is in one Cluster slot.
-- KEYS     the stock key of each of the calls' SKUs followed by its hold
--          marker (orders_holds.lua), and the records of their idempotency
--          keys
-- ARGV[1]  how long to keep a record, in ms
-- then per call three values: the index in KEYS of its SKU's stock key,
-- its signed quantity (as move.lua's ARGV[1]), and the index in KEYS of its
-- key's record, 0 for none; with a ledger (ledger.lua) two more: the
-- call's key and reference, "" for none.
-- Returns two integers per call, in order: a code and a value.
--   0 moved, value the remaining stock
--   1 refused (fewer units, or past MaxStock), value the stock
--   2 the SKU was never initialised
--   3 the key's record says an earlier call took effect, value its remaining
--   4 the stock key does not hold a number
-- The stock of each SKU moves once, at the end, by DECRBY of the sum of its
-- calls' moves; numbers are formatted with %d where C's long has 64 bits,
-- %.0f elsewhere (as in move.lua), so they stay exact. A keyed
-- call that fits records itself with one SET NX GET (Redis 7.0 or later).
local numfmt = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f'
local stock, start, order = {}, {}, {}
local out = {}
if ledger then
  ledger.buffer() -- one stream entry per SKU, written at the end
end
for i = 2, #ARGV, ledger and 5 or 3 do
  local s, q, k = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local code, val = 0, 0
  local cur = stock[s]
  if cur == nil then -- the SKU's first call in the batch: its hold marker
    -- (orders_holds.lua) is after the stock key in KEYS
    local both = redis.call('MGET', KEYS[s], KEYS[s + 1])
    local raw = both[1]
    if both[2] then -- expired holds go back first
      local h = holds()
      if h.release_due(h.sku_key(KEYS[s + 1], 'e'), both[2]) > 0 then
        raw = redis.call('GET', KEYS[s])
      end
    end
    cur = false
    if raw then
      cur = tonumber(raw) or 'nan'
    end
    stock[s], start[s] = cur, cur
    order[#order + 1] = s
  end
  local fits = type(cur) == 'number' and q <= cur and -q <= 9007199254740991 - cur
  local first
  if k > 0 then
    if fits then -- record the call unless an earlier one did, in one command
      first = redis.call('SET', KEYS[k], string.format(numfmt, cur - q), 'NX', 'GET', 'PX', ARGV[1])
    else
      first = redis.call('GET', KEYS[k])
    end
  end
  if first then
    code, val = 3, tonumber(string.match(first, '^%d+'))
  elseif not cur then
    code = 2
  elseif cur == 'nan' then
    code = 4
  elseif not fits then
    code, val = 1, cur
  else
    cur = cur - q
    stock[s], val = cur, cur
    if ledger then
      ledger.add(KEYS[s], q > 0 and 'reduce' or 'return', math.abs(q), cur, ARGV[i + 3], ARGV[i + 4])
    end
  end
  out[#out + 1] = code
  out[#out + 1] = val
end
for _, s in ipairs(order) do
  local cur = stock[s]
  if type(cur) == 'number' and cur ~= start[s] then
    redis.call('DECRBY', KEYS[s], string.format(numfmt, start[s] - cur))
  end
end
if ledger then
  ledger.flush()
end
return out
