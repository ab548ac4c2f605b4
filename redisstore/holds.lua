-- The holds of one SKU, beside its stock (see holds.go).
-- KEYS[1]: the stock key. KEYS[2]: the hash of the SKU's hold lines (order
-- id -> qty). KEYS[3]: the sorted set of its lines by expiry (order id,
-- Unix ms). KEYS[4]: the SKU's held total (a decimal integer string,
-- absent when no units are held).
-- ARGV[1] is the operation:
--   "read", max: {stock, held, id...}, the ids of up to max lines whose
--     expiry has passed on the Redis clock, earliest first; {} when the SKU
--     has no stock.
--   "hold", version, newStock, id, qty, expires: 1 when written; 0 when the
--     stock is not version (or absent); -1 when the line exists.
--   "unhold", id, sold ("1" or "0"), maxStock: the line's qty, 0 when
--     there is no line (nothing written).
-- Quantities are below 2^53, exact as Lua numbers; they are written as
-- given or formatted as integers.
local op = ARGV[1]
local function int(n)
  return string.format('%.0f', n)
end
if op == 'read' then
  local stock = redis.call('GET', KEYS[1])
  if not stock then
    return {}
  end
  local out = {stock, redis.call('GET', KEYS[4]) or '0'}
  local max = tonumber(ARGV[2])
  -- No lines, no expired ones: the clock is not needed then.
  if max > 0 and redis.call('EXISTS', KEYS[3]) == 1 then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, max)
    for _, id in ipairs(ids) do
      out[#out + 1] = id
    end
  end
  return out
elseif op == 'hold' then
  local id = ARGV[4]
  if redis.call('HEXISTS', KEYS[2], id) == 1 then
    return -1
  end
  local cur = redis.call('GET', KEYS[1])
  if not cur or tonumber(cur) ~= tonumber(ARGV[2]) then
    return 0
  end
  redis.call('SET', KEYS[1], ARGV[3])
  redis.call('HSET', KEYS[2], id, ARGV[5])
  redis.call('ZADD', KEYS[3], ARGV[6], id)
  redis.call('INCRBY', KEYS[4], ARGV[5])
  return 1
elseif op == 'unhold' then
  local id = ARGV[2]
  local q = redis.call('HGET', KEYS[2], id)
  if not q then
    return 0
  end
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
  if redis.call('DECRBY', KEYS[4], q) <= 0 then
    redis.call('DEL', KEYS[4])
  end
  if ARGV[3] ~= '1' then
    local cur = redis.call('GET', KEYS[1])
    if cur then
      local n = tonumber(cur) + tonumber(q)
      local max = tonumber(ARGV[4])
      if n > max then
        n = max
      end
      redis.call('SET', KEYS[1], int(n))
    end
  end
  return tonumber(q)
end
return redis.error_reply('holds.lua: unknown operation ' .. tostring(op))
