-- Atomically moves stock of one SKU, recording an idempotency key.
-- KEYS[1]  the stock key
-- KEYS[2]  ARGV[5] "key": the idempotency key; "window": the resend window
--          of the calling Manager on this SKU (see internal/rediskeys)
-- ARGV[1]  "reduce" or "return"
-- ARGV[2]  the quantity, 1..MaxStock
-- ARGV[3]  MaxStock
-- ARGV[4]  how long to keep the idempotency key, in milliseconds
-- ARGV[5]  "none", "key" or "window"
-- ARGV[6]  "key": the call's token ("" when the client never resends);
--          "window": the call's sequence number
-- ARGV[7]  the window size; ARGV[8] how long to keep the window, in ms
-- Returns {status, stock}: status is "ok", "dup" (stock is the first call's
-- remaining), "notfound", "insufficient", "overflow" (stock is the current)
-- or "stale" (a window call older than the window: refused).
-- Stock is moved by DECRBY/INCRBY and numbers are written with %.0f, never
-- formatted by Lua's tostring (%.14g), so values up to 2^53 stay exact.
local mode = ARGV[5]
local seq, floor
if mode == 'key' then
  local first = redis.call('GET', KEYS[2])
  if first then
    local rem, tok = string.match(first, '^(%d+):?(.*)$')
    if tok ~= '' and tok == ARGV[6] then
      return {'ok', rem} -- the client sent this very call again
    end
    return {'dup', rem}
  end
elseif mode == 'window' then
  seq = tonumber(ARGV[6])
  local st = redis.call('HMGET', KEYS[2], 'f', ARGV[6])
  if st[2] then
    return {'ok', st[2]} -- the client sent this very call again
  end
  floor = tonumber(st[1]) or 0
  if seq < floor then
    return {'stale', 0}
  end
end
local raw = redis.call('GET', KEYS[1])
if not raw then
  return {'notfound', 0}
end
local cur = tonumber(raw)
if not cur then
  return redis.error_reply('stock key ' .. KEYS[1] .. ' does not hold a number')
end
local qty = tonumber(ARGV[2])
local rem
if ARGV[1] == 'reduce' then
  if cur < qty then
    return {'insufficient', cur}
  end
  rem = redis.call('DECRBY', KEYS[1], ARGV[2])
else
  if qty > tonumber(ARGV[3]) - cur then
    return {'overflow', cur}
  end
  rem = redis.call('INCRBY', KEYS[1], ARGV[2])
end
local out = string.format('%.0f', rem)
if mode == 'key' then
  if ARGV[6] ~= '' then
    out = out .. ':' .. ARGV[6]
  end
  redis.call('SET', KEYS[2], out, 'PX', ARGV[4])
elseif mode == 'window' then
  -- Keep seqs floor..; move the floor to seq-size+1, dropping what falls out.
  local size = tonumber(ARGV[7])
  local nf = seq - size + 1
  if nf > floor then
    if nf - floor >= size then
      redis.call('DEL', KEYS[2])
    else
      local drop = {}
      for s = floor, nf - 1 do
        drop[#drop + 1] = string.format('%.0f', s)
      end
      redis.call('HDEL', KEYS[2], unpack(drop))
    end
    redis.call('HSET', KEYS[2], 'f', string.format('%.0f', nf), ARGV[6], out)
  else
    redis.call('HSET', KEYS[2], ARGV[6], out)
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[8])
end
return {'ok', rem}
