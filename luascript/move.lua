-- Atomically moves stock of one SKU, recording an idempotency key.
-- KEYS[1]  the stock key
-- then, when ARGV[6] is "1", the call key: it marks that this very call
--          took effect, in case the client sends it again
-- then, when ARGV[7] is "1", the idempotency key
-- ARGV[1]  "reduce" or "return"
-- ARGV[2]  the quantity, 1..MaxStock
-- ARGV[3]  MaxStock
-- ARGV[4]  how long to keep the idempotency key, in milliseconds
-- ARGV[5]  how long to keep the call key, in milliseconds
-- ARGV[6]  "1" when a call key is given
-- ARGV[7]  "1" when an idempotency key is given
-- Returns {status, stock}: status is "ok", "dup" (stock is the first call's
-- remaining), "notfound", "insufficient" or "overflow" (stock is the current).
local callKey, idemKey
local n = 2
if ARGV[6] == '1' then
  callKey = KEYS[n]
  n = n + 1
end
if ARGV[7] == '1' then
  idemKey = KEYS[n]
end
if callKey then
  -- The client sent this call again after losing the reply: answer again.
  local done = redis.call('GET', callKey)
  if done then
    return {'ok', tonumber(done)}
  end
end
if idemKey then
  local first = redis.call('GET', idemKey)
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
if callKey then
  redis.call('SET', callKey, rem, 'PX', ARGV[5])
end
if idemKey then
  redis.call('SET', idemKey, rem, 'PX', ARGV[4])
end
return {'ok', rem}
