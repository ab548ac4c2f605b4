-- Compare-and-set of one SKU's stock, recording its idempotency key.
-- KEYS[1]: the stock key. KEYS[2]: ARGV[4] "key": the idempotency key;
-- "window": the resend window of the calling Store on this SKU (see
-- internal/rediskeys).
-- ARGV[1]: the stock that was read (it is the version). ARGV[2]: the new
-- stock. ARGV[3]: how long to keep the idempotency key, in milliseconds.
-- ARGV[4]: "none", "key" or "window". ARGV[5]: "key": the call's token (""
-- when the client never resends); "window": the call's sequence number.
-- ARGV[6]: the window size. ARGV[7]: how long to keep a window, in ms.
-- Returns 1 when written (or when this very call wrote already: its reply
-- was lost and the client sent it again), 0 when the stock moved (or is
-- gone), -1 when the idempotency key is already recorded, -2 when a window
-- call's slot holds a later call (refused: it may have run). Stock values
-- are compared as numbers, exact up to 2^53, and written as given.
local mode = ARGV[4]
if mode == 'key' then
  local first = redis.call('GET', KEYS[2])
  if first then
    local tok = string.match(first, '^%d+:(.*)$')
    if tok and tok ~= '' and tok == ARGV[5] then
      return 1
    end
    return -1
  end
end
-- The window: a ring of unsigned 63-bit slots, slot seq mod size holding
-- the seq of the last call that used it; a slot only ever grows.
local slot, seq
if mode == 'window' then
  seq = tonumber(ARGV[5])
  slot = '#' .. (seq % tonumber(ARGV[6]))
end
local cur = redis.call('GET', KEYS[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then
  if slot then -- a copy of a write that ran sees the stock it wrote
    local old = redis.call('BITFIELD', KEYS[2], 'GET', 'u63', slot)[1]
    if old == seq then
      return 1
    elseif old > seq then
      return -2
    end
  end
  return 0
end
if slot then
  local old = redis.call('BITFIELD', KEYS[2], 'SET', 'u63', slot, ARGV[5])[1]
  if old == seq then
    return 1
  elseif old > seq then
    redis.call('BITFIELD', KEYS[2], 'SET', 'u63', slot, old) -- give it back
    return -2
  elseif old == 0 then -- a slot's first use: the window may be new
    redis.call('PEXPIRE', KEYS[2], ARGV[7])
  end
end
redis.call('SET', KEYS[1], ARGV[2])
if mode == 'key' then
  local v = ARGV[2]
  if ARGV[5] ~= '' then
    v = v .. ':' .. ARGV[5]
  end
  redis.call('SET', KEYS[2], v, 'PX', ARGV[3])
end
return 1
