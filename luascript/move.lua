-- Moves the stock of one SKU: one Reduce or Return, with or without an
-- idempotency key. Redis runs it alone, so the check and the move are one
-- atomic step.
-- KEYS[1]  the stock key
-- KEYS[2]  with ARGV[2]: the record of the call's idempotency key
-- ARGV[1]  the signed quantity: n takes n units (Reduce), -n gives n back
--          (Return); |n| in 1..MaxStock
-- ARGV[2]  if the call has a key: how long to keep its record, in ms
-- Returns the remaining stock (>= 0) once moved; -1-stock when refused (a
-- Reduce finding fewer units, or a Return that would pass MaxStock); nil
-- when the SKU was never initialised; {record} when the key's record says
-- an earlier call took effect (its remaining, then perhaps ":" and more).
-- Stock moves by DECRBY (DECRBY of -n adds n), never by a SET of a number
-- Lua computed, and numbers are formatted with %.0f, never tostring
-- (%.14g), so values up to 2^53 stay exact.
local keyed = ARGV[2] ~= nil
if keyed then
  local first = redis.call('GET', KEYS[2])
  if first then
    return {first}
  end
end
local raw = redis.call('GET', KEYS[1])
if not raw then
  return false
end
local cur = tonumber(raw)
if not cur then
  return redis.error_reply('stock key ' .. KEYS[1] .. ' does not hold a number')
end
local q = tonumber(ARGV[1])
if q > cur or -q > 9007199254740991 - cur then
  return -1 - cur
end
local rem = redis.call('DECRBY', KEYS[1], ARGV[1])
if keyed then
  redis.call('SET', KEYS[2], string.format('%.0f', rem), 'PX', ARGV[2])
end
return rem
