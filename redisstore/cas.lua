-- Compare-and-set of one SKU's stock, recording its idempotency key.
-- KEYS[1]: the stock key. KEYS[2]: ARGV[4] "key": the idempotency key;
-- "window": the resend window of the calling Store on this SKU (see
-- internal/rediskeys).
-- ARGV[1]: the stock that was read (it is the version). ARGV[2]: the new
-- stock. ARGV[3]: how long to keep the idempotency key, in milliseconds.
-- ARGV[4]: "none", "key" or "window". ARGV[5]: "key": the call's token (""
-- when the client never resends); "window": the call's sequence number.
-- ARGV[6]: the window size. ARGV[7]: how long to keep the window, in ms.
-- Returns 1 when written (or when this very call wrote already: its reply
-- was lost and the client sent it again), 0 when the stock moved (or is
-- gone), -1 when the idempotency key is already recorded, -2 when a window
-- call is older than the window (refused). Stock values are compared as
-- numbers, exact up to 2^53, and written as the strings given.
local mode = ARGV[4]
local seq, floor
if mode == 'key' then
  local first = redis.call('GET', KEYS[2])
  if first then
    local tok = string.match(first, '^%d+:(.*)$')
    if tok and tok ~= '' and tok == ARGV[5] then
      return 1
    end
    return -1
  end
elseif mode == 'window' then
  seq = tonumber(ARGV[5])
  local st = redis.call('HMGET', KEYS[2], 'f', ARGV[5])
  if st[2] then
    return 1
  end
  floor = tonumber(st[1]) or 0
  if seq < floor then
    return -2
  end
end
local cur = redis.call('GET', KEYS[1])
if not cur or tonumber(cur) ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
if mode == 'key' then
  local v = ARGV[2]
  if ARGV[5] ~= '' then
    v = v .. ':' .. ARGV[5]
  end
  redis.call('SET', KEYS[2], v, 'PX', ARGV[3])
elseif mode == 'window' then
  local size = tonumber(ARGV[6])
  local nf = seq - size + 1
  if nf > floor then
    if nf - floor >= size then
      redis.call('DEL', KEYS[2])
    else
      local drop = {}
      for s = floor, nf - 1 do
        drop[#drop + 1] = string.format('%.0f', s)
      end
      redis.call('HDEL', KEYS[2], unpack(drop))
    end
    redis.call('HSET', KEYS[2], 'f', string.format('%.0f', nf), ARGV[5], '1')
  else
    redis.call('HSET', KEYS[2], ARGV[5], '1')
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[7])
end
return 1
