-- One step on the parts of one SKU (see holds.lua), after releasing its
-- expired parts.
-- KEYS[1]  the SKU's state hash (see move.lua)
-- KEYS[2]  the SKU's journal stream
-- KEYS[3]  the sweep index of the SKU's slot: SKU -> when Sweep should look
-- ARGV[1]  the op: hold, pin, sell, release, check, sweep
-- ARGV[2]  the part's field (P:NONCE:KIND:ID); for check and sweep unused
-- hold     ARGV[3] units, ARGV[4] deadline (ms, Redis clock), ARGV[5]
--          low-water mark, ARGV[6] refill request lifetime (ms), ARGV[7]
--          the SKU (its member in the sweep index). Returns
--          {0, remaining, refill, g} once held; {1, remaining} when refused;
--          {2, g, a} when the allotment is short but SQL may have units;
--          {6} when the part exists already.
--          With LEDGER, ARGV[8]: the hold's ledger record ('' for none).
-- pin      Returns {0} once pinned (it no longer expires by itself), {7}
--          when the part is gone (released, or sold).
-- sell, release  Settle the part: {0} once settled, {7} when it is gone.
--          With LEDGER, ARGV[3] the ledger kind of the move ('' for none)
--          and ARGV[4] the rest of its record after the units (the key,
--          the reference, the hold id; see holds.lua).
-- check    ARGV[3] units to return: {0, remaining} when they fit below
--          MaxStock, {1, remaining} otherwise.
-- sweep    ARGV[3] grace (ms), ARGV[4] the SKU: {0, released, field...}:
--          the pinned parts whose deadline passed grace ago (their Confirm
--          died); it sets the SKU's score in the sweep index to when it
--          should look again, or removes the SKU when it has no parts.
-- Every op replies {3} when Redis has no state for the SKU.
local state, journal, index = KEYS[1], KEYS[2], KEYS[3]
local op, f = ARGV[1], ARGV[2]
local gen = redis.call('HGET', state, 'n')
if not gen then
  if op == 'sweep' then
    redis.call('ZREM', index, ARGV[4])
  end
  return {3}
end
local now = hnow()
local released = release_due(state, journal, now)

-- reindex sets when Sweep should next look at the SKU.
local function reindex(sku)
  local all = redis.call('HGETALL', state)
  local nx
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'P:' then
      local _, dl, pin = parse(all[i + 1])
      if pin then
        dl = dl + tonumber(ARGV[3])
      end
      if not nx or dl < nx then
        nx = dl
      end
    end
  end
  if nx then
    redis.call('ZADD', index, fmt(nx), sku)
  else
    redis.call('ZREM', index, sku)
  end
end

if op == 'hold' then
  if redis.call('HEXISTS', state, f) == 1 then
    return {6}
  end
  local h = redis.call('HMGET', state, 'a', 'p', 'g', 'r', 'x')
  local a, p, q = tonumber(h[1]), tonumber(h[2]), tonumber(ARGV[3])
  if q > a then
    if q > a + p then
      return {1, fmt(a + p)}
    end
    return {2, h[3], h[1]}
  end
  local na = redis.call('HINCRBY', state, 'a', fmt(-q))
  redis.call('HINCRBY', state, 'h', ARGV[3])
  redis.call('HSET', state, f, ARGV[3] .. ' ' .. ARGV[4] .. ' 0')
  if not h[5] or tonumber(ARGV[4]) < tonumber(h[5]) then
    redis.call('HSET', state, 'x', ARGV[4])
  end
  redis.call('ZADD', index, 'LT', ARGV[4], ARGV[7])
  if LEDGER and ARGV[8] and ARGV[8] ~= '' then
    redis.call('XADD', journal, '*', 'n', gen, 'd', ARGV[3], 's', '0', 'h', ARGV[3], 'l', ARGV[8])
  else
    redis.call('XADD', journal, '*', 'n', gen, 'd', ARGV[3], 's', '0', 'h', ARGV[3])
  end
  local refill = 0
  if na < tonumber(ARGV[5]) and p > 0 and (not h[4] or now - tonumber(h[4]) >= tonumber(ARGV[6])) then
    redis.call('HSET', state, 'r', fmt(now))
    refill = 1
  end
  return {0, fmt(na + p), refill, h[3]}
elseif op == 'pin' then
  local v = redis.call('HGET', state, f)
  if not v then
    return {7}
  end
  local q, dl, pin = parse(v)
  if not pin then
    redis.call('HSET', state, f, fmt(q) .. ' ' .. fmt(dl) .. ' 1')
    redis.call('HINCRBY', state, 'k', 1)
  end
  return {0}
elseif op == 'sell' or op == 'release' then
  local v = redis.call('HGET', state, f)
  if not v then
    return {7}
  end
  local q, _, pin = parse(v)
  redis.call('HDEL', state, f)
  if pin then
    redis.call('HINCRBY', state, 'k', -1)
  end
  redis.call('HINCRBY', state, 'h', fmt(-q))
  local entry = {'n', gen, 'd', '0', 's', fmt(q), 'h', fmt(-q)}
  if op == 'release' then
    redis.call('HINCRBY', state, 'a', fmt(q))
    entry[4], entry[6] = fmt(-q), '0'
  end
  if LEDGER and ARGV[3] and ARGV[3] ~= '' then
    entry[9], entry[10] = 'l', ARGV[3] .. ' ' .. fmt(q) .. '\n' .. ARGV[4]
  end
  redis.call('XADD', journal, '*', unpack(entry))
  return {0}
elseif op == 'check' then
  local h = redis.call('HMGET', state, 'a', 'p')
  local rem = tonumber(h[1]) + tonumber(h[2])
  if tonumber(ARGV[3]) > 9007199254740991 - rem then
    return {1, fmt(rem)}
  end
  return {0, fmt(rem)}
elseif op == 'sweep' then
  local out = {0, released}
  if tonumber(redis.call('HGET', state, 'k') or '0') > 0 then
    local all = redis.call('HGETALL', state)
    for i = 1, #all, 2 do
      if string.sub(all[i], 1, 2) == 'P:' then
        local _, dl, pin = parse(all[i + 1])
        if pin and dl + tonumber(ARGV[3]) <= now then
          out[#out + 1] = all[i]
        end
      end
    end
  end
  reindex(ARGV[4])
  return out
end
return redis.error_reply('tiered: unknown parts op ' .. tostring(op))
