-- Moves the Redis-held stock of one SKU (one Reduce or Return) and journals
-- the move, in one atomic step.
-- KEYS[1]  the SKU's state hash: a (units Redis may sell, its allotment),
--          p (SQL's unallotted units as Redis last learnt them, never less
--          than SQL's), n (generation: SQL's Init count), g (last grant id
--          applied), r (Redis TIME in ms when a refill was asked for)
-- KEYS[2]  the SKU's journal stream
-- KEYS[3]  with ARGV[5]: the record of the call's idempotency key
-- ARGV[1]  units taken: q > 0 for a Reduce, -q for a Return
-- ARGV[2]  the same negated (the change to a)
-- ARGV[3]  low-water mark: below it a Reduce asks for a refill
-- ARGV[4]  how long a refill request stands before another may be asked, ms
-- ARGV[5]  if the call has a key: how long to keep its record, ms ('' for
--          none when ARGV[6] follows)
-- ARGV[6]  with LEDGER: the call's ledger record (see holds.lua), in the
--          journal entry's l
-- Returns {0, remaining, refill (1 or 0), g} once moved; {1, remaining} when
-- refused (fewer units than asked, or a Return past MaxStock); {2, g, a} when
-- the allotment is short but SQL may have units (grant, then call again);
-- {3} when Redis has no state for the SKU (warm it up, then call again);
-- {4, recorded} when the key's record says an earlier call took effect.
-- Expired holds (holds.lua, prepended) are released first. A keyed move's
-- journal entry carries its key (k, see keyitem in holds.lua), so that
-- SQL records the keys it synced.
local h = redis.call('HMGET', KEYS[1], 'a', 'p', 'n', 'g', 'r', 'x')
if not h[1] then
  return {3}
end
if h[6] and release_due(KEYS[1], KEYS[2], hnow()) > 0 then
  h = redis.call('HMGET', KEYS[1], 'a', 'p', 'n', 'g', 'r', 'x')
end
local keyed = ARGV[5] ~= nil and ARGV[5] ~= ''
if keyed then
  local first = redis.call('GET', KEYS[3])
  if first then
    return {4, first}
  end
end
local a, p, q = tonumber(h[1]), tonumber(h[2]), tonumber(ARGV[1])
if q > 0 then
  if q > a then
    if q > a + p then
      return {1, string.format('%.0f', a + p)}
    end
    return {2, h[4], h[1]}
  end
elseif -q > 9007199254740991 - a - p then
  return {1, string.format('%.0f', a + p)}
end
local na = redis.call('HINCRBY', KEYS[1], 'a', ARGV[2])
local rem = string.format('%.0f', na + p)
if keyed then
  if LEDGER then
    redis.call('XADD', KEYS[2], '*', 'n', h[3], 'd', ARGV[1], 'k', keyitem(KEYS[3], q, na + p), 'l', ARGV[6])
  else
    redis.call('XADD', KEYS[2], '*', 'n', h[3], 'd', ARGV[1], 'k', keyitem(KEYS[3], q, na + p))
  end
  redis.call('SET', KEYS[3], rem, 'PX', ARGV[5])
elseif LEDGER then
  redis.call('XADD', KEYS[2], '*', 'n', h[3], 'd', ARGV[1], 'l', ARGV[6])
else
  redis.call('XADD', KEYS[2], '*', 'n', h[3], 'd', ARGV[1])
end
local refill = 0
if q > 0 and na < tonumber(ARGV[3]) and p > 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not h[5] or now - tonumber(h[5]) >= tonumber(ARGV[4]) then
    redis.call('HSET', KEYS[1], 'r', string.format('%.0f', now))
    refill = 1
  end
end
return {0, rem, refill, h[4]}
