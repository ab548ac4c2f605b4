-- Moves the stock of one SKU: one Reduce or Return, with or without an
-- idempotency key. Redis runs it alone, so the check and the move are one
-- atomic step.
-- KEYS[1]  the stock key
-- KEYS[2]  with ARGV[2]: the record of the call's idempotency key
-- KEYS[#KEYS] the SKU's hold marker (orders_holds.lua), absent without holds
-- ARGV[1]  the signed quantity: n takes n units (Reduce), -n gives n back
--          (Return); |n| in 1..MaxStock
-- ARGV[2]  if the call has a key: how long to keep its record, in ms
-- ARGV[3], ARGV[4]  with a ledger (ledger.lua): the call's key and
--          reference, "" for none (ARGV[2] is then "" when unkeyed)
-- Returns the remaining stock (>= 0) once moved; -1-stock when refused (a
-- Reduce finding fewer units, or a Return that would pass MaxStock); nil
-- when the SKU was never initialised; {record} when the key's record says
-- an earlier call took effect (its remaining, then perhaps ":" and more).
-- Stock moves by DECRBY (DECRBY of -n adds n), never by a SET of a number
-- Lua computed, and numbers are formatted with %d where C's long has 64
-- bits (every 64-bit Redis; an integer printf, far cheaper than %.0f's
-- floating one), with %.0f elsewhere, never with tostring (%.14g), so
-- values up to 2^53 stay exact. A move that fits costs GET, DECRBY and,
-- with a key, one SET NX GET (so it needs Redis 7.0 or later).
-- A hook that must run before every move (a later hold marker, say) can
-- take the keys after these, at KEYS[keyed and 3 or 2].
local keyed = #KEYS == 3
local marker = keyed and 3 or 2 -- the SKU's hold marker (orders_holds.lua)
local both = redis.call('MGET', KEYS[1], KEYS[marker])
local raw = both[1]
if both[2] then -- expired holds go back first
  local h = holds()
  if h.release_due(h.sku_key(KEYS[marker], 'e'), both[2]) > 0 then
    raw = redis.call('GET', KEYS[1])
  end
end
local cur = tonumber(raw)
local q = tonumber(ARGV[1])
if keyed and not (cur and q <= cur and -q <= 9007199254740991 - cur) then
  -- Refused, or no stock: an earlier call with the key may have run.
  local first = redis.call('GET', KEYS[2])
  if first then
    return {first}
  end
end
if not raw then
  return false
end
if not cur then
  return redis.error_reply('stock key ' .. KEYS[1] .. ' does not hold a number')
end
if q > cur or -q > 9007199254740991 - cur then
  return -1 - cur
end
if keyed then
  -- Record the call unless an earlier one did, in one command (Redis 7).
  local numfmt = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f'
  local first = redis.call('SET', KEYS[2], string.format(numfmt, cur - q), 'NX', 'GET', 'PX', ARGV[2])
  if first then
    return {first}
  end
end
local left = redis.call('DECRBY', KEYS[1], ARGV[1])
if ledger then
  ledger.add(KEYS[1], q > 0 and 'reduce' or 'return', math.abs(q), left, ARGV[3], ARGV[4])
end
return left
