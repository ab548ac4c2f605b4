-- Atomically moves stock of one SKU, recording an idempotency key.
-- KEYS[1]  the stock key
-- KEYS[2]  the idempotency key (absent when the call has none)
-- ARGV[1]  "reduce" or "return"
-- ARGV[2]  the quantity, 1..MaxStock
-- ARGV[3]  MaxStock
-- ARGV[4]  how long to keep the idempotency key, in milliseconds
-- Returns {status, stock}: status is "ok", "dup" (stock is the first call's
-- remaining), "notfound", "insufficient" or "overflow" (stock is the current).
if KEYS[2] then
  local first = redis.call('GET', KEYS[2])
  if first then
    return {'dup', tonumber(first)}
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
if KEYS[2] then
  redis.call('SET', KEYS[2], rem, 'PX', ARGV[4])
end
return {'ok', rem}
