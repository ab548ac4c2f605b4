-- The writes of one SKU: its stock, its idempotency keys and its holds
-- (see redisstore.go and holds.go), and, when the Store keeps a movement
-- ledger, the entry of each write (ledger.add, from internal/redisledger's
-- ledger.lua; without one the script starts with "local ledger", so that
-- every "if ledger" is false and nothing more is done).
-- KEYS[1]: the stock key. For "cas", KEYS[2], when keyed: the idempotency
-- key. For the others, KEYS[2]: the hash of the SKU's hold lines (order id
-- -> qty); KEYS[3]: the sorted set of its lines by expiry (order id, Unix
-- ms); KEYS[4]: the SKU's held total (a decimal integer string, absent
-- when no units are held).
-- ARGV[1] is the operation:
--   "cas", version, newStock, keyTTL (ms), "key" or "none": the
--     compare-and-set of the stock (the version is the stock that was
--     read), recording the idempotency key for keyTTL. 1 when written; 0
--     when the stock is not version (or absent); -1 when the key is
--     recorded already. A call is never sent twice (see
--     internal/rediskeys.Script), so a recorded key is always another
--     call's.
--   "read", max: {stock, held, id...}, the ids of up to max lines whose
--     expiry has passed on the Redis clock, earliest first; {} when the SKU
--     has no stock.
--   "hold", version, newStock, id, qty, expires: 1 when written; 0 when the
--     stock is not version (or absent); -1 when the line exists.
--   "unhold", id, sold ("1" or "0"), maxStock: the line's qty, 0 when
--     there is no line (nothing written).
--   "init", qty: sets the stock (with a ledger only: without one, Init is
--     a SET of its own).
-- With a ledger, "cas", "hold" and "unhold" take four more arguments, the
-- entry's kind ("" for none), key, reference and hold id; the units and
-- the stock after are the write's.
-- Quantities are below 2^53, exact as Lua numbers; they are written as
-- given or formatted as integers.
local op = ARGV[1]
local function int(n)
  return string.format('%.0f', n)
end
-- record adds the entry of this write, its kind, key, reference and hold
-- id the arguments from i on, when the script keeps a ledger.
local function record(i, units, available)
  if ledger and ARGV[i] ~= '' and (tonumber(units) > 0 or ARGV[i] == 'init') then
    ledger.add(KEYS[1], ARGV[i], units, available, ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
  end
end
-- set sets the stock to new if it is still version: false when it is not
-- (or absent), and nothing written.
local function set(version, new)
  local cur = redis.call('GET', KEYS[1])
  if not cur or tonumber(cur) ~= tonumber(version) then
    return false
  end
  redis.call('SET', KEYS[1], new)
  return true
end
if op == 'cas' then
  local keyed = ARGV[5] == 'key'
  if keyed and redis.call('EXISTS', KEYS[2]) == 1 then
    return -1
  end
  if not set(ARGV[2], ARGV[3]) then
    return 0
  end
  if keyed then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  end
  record(6, math.abs(tonumber(ARGV[2]) - tonumber(ARGV[3])), ARGV[3])
  return 1
elseif op == 'read' then
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
  if not set(ARGV[2], ARGV[3]) then
    return 0
  end
  redis.call('HSET', KEYS[2], id, ARGV[5])
  redis.call('ZADD', KEYS[3], ARGV[6], id)
  redis.call('INCRBY', KEYS[4], ARGV[5])
  record(7, ARGV[5], ARGV[3])
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
  local cur
  if ARGV[3] ~= '1' or ledger then
    cur = redis.call('GET', KEYS[1])
  end
  if cur and ARGV[3] ~= '1' then
    local n = tonumber(cur) + tonumber(q)
    local max = tonumber(ARGV[4])
    if n > max then
      n = max
    end
    cur = int(n)
    redis.call('SET', KEYS[1], cur)
  end
  if cur then
    record(5, q, cur)
  end
  return tonumber(q)
elseif op == 'init' then
  redis.call('SET', KEYS[1], ARGV[2])
  record(3, ARGV[2], ARGV[2])
  return 1
end
return redis.error_reply('stock.lua: unknown operation ' .. tostring(op))
