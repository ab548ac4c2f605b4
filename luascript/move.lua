-- Atomically moves stock of one SKU, recording an idempotency key.
-- KEYS[1]  the stock key
-- KEYS[2]  ARGV[5] "key": the idempotency key; "window": the resend window
--          of the calling Manager on this SKU (see internal/rediskeys)
-- KEYS[#KEYS] the SKU's hold marker (orders_holds.lua), absent without holds
-- ARGV[1]  "reduce" or "return"
-- ARGV[2]  the quantity, 1..MaxStock
-- ARGV[3]  MaxStock
-- ARGV[4]  how long to keep the idempotency key, in milliseconds
-- ARGV[5]  "none", "key" or "window"
-- ARGV[6]  "key": the call's token ("" when the client never resends);
--          "window": the call's sequence number
-- ARGV[7]  the window size in calls; ARGV[8] how long to keep a window
--          once made, in ms
-- Returns {status, stock}: status is "ok", "dup" (stock is the first call's
-- remaining), "notfound", "insufficient", "overflow" (stock is the current)
-- or "stale" (a window call whose slot a later call took: refused).
-- Stock is moved by DECRBY/INCRBY and numbers are never formatted by Lua's
-- tostring (%.14g), so values up to 2^53 stay exact.
local mode = ARGV[5]
if mode == 'key' then
  local first = redis.call('GET', KEYS[2])
  if first then
    local rem, tok = string.match(first, '^(%d+):?(.*)$')
    if tok ~= '' and tok == ARGV[6] then
      return {'ok', rem} -- the client sent this very call again
    end
    return {'dup', rem}
  end
end
local both = redis.call('MGET', KEYS[1], KEYS[#KEYS])
local raw = both[1]
if both[2] then -- orders_holds.lua: expired holds go back first
  local h = holds()
  if h.release_due(h.sku_key(KEYS[#KEYS], 'e'), both[2]) > 0 then
    raw = redis.call('GET', KEYS[1])
  end
end
if not raw then
  return {'notfound', 0}
end
local cur = tonumber(raw)
if not cur then
  return redis.error_reply('stock key ' .. KEYS[1] .. ' does not hold a number')
end
-- The window is a ring of unsigned 63-bit slots; slot seq mod size holds
-- the seq of the last call that used it, and only ever grows. A copy of a
-- call that ran finds its own seq and is answered with the stock as it is
-- now; a call whose slot holds a later seq is refused, as it may have run.
local slot
if mode == 'window' then
  slot = '#' .. (tonumber(ARGV[6]) % tonumber(ARGV[7]))
end
local function seen(old)
  if old == tonumber(ARGV[6]) then
    return {'ok', cur}
  elseif old > tonumber(ARGV[6]) then
    return {'stale', 0}
  end
end
local qty = tonumber(ARGV[2])
local refused
if ARGV[1] == 'reduce' then
  if cur < qty then
    refused = 'insufficient'
  end
elseif qty > tonumber(ARGV[3]) - cur then
  refused = 'overflow'
end
if refused then
  if slot then
    local r = seen(redis.call('BITFIELD', KEYS[2], 'GET', 'u63', slot)[1])
    if r then
      return r
    end
  end
  return {refused, cur}
end
if slot then
  -- Take the slot and read its last seq in one command.
  local old = redis.call('BITFIELD', KEYS[2], 'SET', 'u63', slot, ARGV[6])[1]
  local r = seen(old)
  if r then
    if old ~= tonumber(ARGV[6]) then
      redis.call('BITFIELD', KEYS[2], 'SET', 'u63', slot, old) -- give it back
    end
    return r
  end
  if old == 0 then -- a slot's first use: the window may be new
    redis.call('PEXPIRE', KEYS[2], ARGV[8])
  end
end
local rem
if ARGV[1] == 'reduce' then
  rem = redis.call('DECRBY', KEYS[1], ARGV[2])
else
  rem = redis.call('INCRBY', KEYS[1], ARGV[2])
end
if mode == 'key' then
  local out = string.format('%.0f', rem)
  if ARGV[6] ~= '' then
    out = out .. ':' .. ARGV[6]
  end
  redis.call('SET', KEYS[2], out, 'PX', ARGV[4])
end
return {'ok', rem}
