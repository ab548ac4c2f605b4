-- The order records of one bucket (see holds.go).
-- KEYS[1]: the order's record, a hash: l (its lines, JSON), s (state), e
-- (expiry, Unix ms on the Redis clock), a (abandoned at, ms: grace after
-- the create, whatever the expiry; it applies while incomplete), c ("1" once
-- complete), d ("1" once done). KEYS[2]: the bucket's index of orders not
-- done, scored by when they fall due. (A call is never sent twice: see
-- internal/rediskeys.Script.)
-- ARGV[1] is the operation, ARGV[2] the order id:
--   "create", id, lines, ttl ms, grace ms: the record, or -1 when it
--     exists.
--   "get", id: the record, or 0.
--   "step", id, step, keep ms: the record after the step, or 0 (and
--     the id leaves the index).
--   "due", "", max: {id, due, id, due, ...} of up to max orders due now.
-- A record is returned as {1, state, expires, complete, done, lines,
-- changed}.
local op = ARGV[1]
local rec, idx, id = KEYS[1], KEYS[2], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function reply(changed)
  local r = redis.call('HMGET', rec, 's', 'e', 'c', 'd', 'l')
  return {1, r[1], tonumber(r[2]), tonumber(r[3]), tonumber(r[4]), r[5], changed}
end

if op == 'due' then
  return redis.call('ZRANGEBYSCORE', idx, '-inf', now, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[3]))
end
local exists = redis.call('EXISTS', rec) == 1
if op == 'create' then
  if exists then
    return -1
  end
  local e = now + tonumber(ARGV[4])
  local a = now + tonumber(ARGV[5]) -- abandoned grace after it is recorded
  redis.call('HSET', rec, 'l', ARGV[3], 's', 'held', 'e', e, 'a', a, 'c', 0, 'd', 0)
  redis.call('ZADD', idx, a, id)
  return reply(1)
end
if not exists then
  if op == 'step' then
    -- An index entry whose record is gone (deleted from outside) would
    -- come back as due at every sweep: drop it.
    redis.call('ZREM', idx, id)
  end
  return 0
end
if op == 'get' then
  return reply(0)
end
if op ~= 'step' then
  return redis.error_reply('orders.lua: unknown operation ' .. tostring(op))
end
local step = ARGV[3]
local r = redis.call('HMGET', rec, 's', 'e', 'a', 'c', 'd')
local held, e, a = r[1] == 'held', tonumber(r[2]), tonumber(r[3])
local complete, done = r[4] == '1', r[5] == '1'
local function set(...)
  redis.call('HSET', rec, ...)
  return reply(1)
end
if step == 'complete' and held and not complete then
  redis.call('ZADD', idx, e, id)
  return set('c', 1)
elseif (step == 'confirm' or step == 'cancel') and held and complete then
  if now >= e then
    return set('s', 'expired')
  elseif step == 'confirm' then
    return set('s', 'confirmed')
  end
  return set('s', 'cancelled')
elseif step == 'expire' and held and ((complete and now >= e) or (not complete and now >= a)) then
  return set('s', 'expired')
elseif (step == 'finish' and not held and not done) or (step == 'abort' and held and not complete) then
  redis.call('ZREM', idx, id)
  if complete then
    local out = set('d', 1)
    redis.call('PEXPIRE', rec, ARGV[4])
    return out
  end
  local out = reply(1)
  redis.call('DEL', rec)
  return out
end
return reply(0)
