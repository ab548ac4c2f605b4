-- One step on the record of an order (a hold, or a lines call): a hash
-- under the tag of its id, with st (its state: reserving, held,
-- confirmed, released), o (a nonce naming this incarnation of the record,
-- in its parts' fields), dl (its deadline, ms on the Redis clock) and l
-- (its lines, "QTY SKU\n" each).
-- KEYS[1]  the record
-- ARGV[1]  the op:
-- begin    ARGV[2] nonce, ARGV[3] TTL (ms), ARGV[4] how long to keep the
--          record (ms), ARGV[5] the lines. Returns {'ok', deadline}; {'dup',
--          st, nonce, deadline, lines} when the record exists.
-- get      Returns {'ok', st, nonce, deadline, lines}, or {'none'}.
-- to       ARGV[2] nonce, ARGV[3] the states it may leave, comma-separated,
--          ARGV[4] the new state, ARGV[5] how long to keep the record then
--          (ms; 0 leaves its expiry). Returns {'ok', st} when it moved from
--          st, {'no', st} when the record is in another state, {'none'} when
--          there is no record of that nonce.
--          With ARGV[6] '1', it moves only once the deadline has passed
--          (else {'no', st}).
-- retake   ARGV[2] nonce, ARGV[3] a new nonce, ARGV[4] TTL (ms), ARGV[5]
--          how long to keep the record (ms): a record of that nonce still
--          reserving becomes the new nonce's, with the deadline TTL from
--          now. Returns {'ok', deadline}, {'no', st} when it is in another
--          state, {'none'} when there is no record of that nonce.
-- drop     ARGV[2] nonce: deletes the record of that nonce. Returns {'ok'}.
local rec, op = KEYS[1], ARGV[1]
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if op == 'begin' then
  local r = redis.call('HMGET', rec, 'st', 'o', 'dl', 'l')
  if r[1] then
    return {'dup', r[1], r[2], r[3], r[4]}
  end
  local dl = string.format('%.0f', now() + tonumber(ARGV[3]))
  redis.call('HSET', rec, 'st', 'reserving', 'o', ARGV[2], 'dl', dl, 'l', ARGV[5])
  redis.call('PEXPIRE', rec, ARGV[4])
  return {'ok', dl}
end
local r = redis.call('HMGET', rec, 'st', 'o', 'dl', 'l')
if op == 'get' then
  if not r[1] then
    return {'none'}
  end
  return {'ok', r[1], r[2], r[3], r[4]}
end
if not r[1] or r[2] ~= ARGV[2] then
  return {'none'}
end
if op == 'drop' then
  redis.call('DEL', rec)
  return {'ok'}
elseif op == 'retake' then
  if r[1] ~= 'reserving' then
    return {'no', r[1]}
  end
  local dl = string.format('%.0f', now() + tonumber(ARGV[4]))
  redis.call('HSET', rec, 'o', ARGV[3], 'dl', dl)
  redis.call('PEXPIRE', rec, ARGV[5])
  return {'ok', dl}
elseif op == 'to' then
  if ARGV[6] == '1' and now() < tonumber(r[3]) then
    return {'no', r[1]}
  end
  for from in string.gmatch(ARGV[3], '[^,]+') do
    if from == r[1] then
      redis.call('HSET', rec, 'st', ARGV[4])
      if tonumber(ARGV[5]) > 0 then
        redis.call('PEXPIRE', rec, ARGV[5])
      end
      return {'ok', r[1]}
    end
  end
  return {'no', r[1]}
end
return redis.error_reply('tiered: unknown record op ' .. tostring(op))
