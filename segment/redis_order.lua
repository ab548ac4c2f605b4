-- The order record of a hold or of a multi-SKU call (package segment,
-- Redis): a hash in one of the Manager's order buckets, beside the
-- bucket's index (a sorted set of its records, scored by when Sweep should
-- look at them, in ms on this server's clock). Fields: st ("reserving",
-- "held", "confirmed", "released"), n (the nonce of the attempt that owns
-- it: its lines' keys derive from it), dl (when a hold, or a call, falls
-- due), ad (when the attempt reserving it is taken for dead), ln (the lines, "QTY SKU\n" each), kind ("h" hold, "k" keyed lines
-- call, "r" unkeyed), dir ("reduce" or "return"), kt (how long an ended
-- record is kept, ms). The record decides: each change of st is one step
-- here, so of a Confirm, a Cancel and an expiry exactly one wins.
-- KEYS[1]  the record
-- KEYS[2]  the bucket's index
-- ARGV[1]  the op; the rest as each op says
local rec, idx, op = KEYS[1], KEYS[2], ARGV[1]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p = redis.call('HMGET', rec, 'st', 'n', 'dl', 'ln', 'kind', 'dir', 'kt', 'ad', 'on', 'ol')
-- due: whether the record is past its time (an attempt's, while reserving)
local function due()
  if p[1] == 'reserving' then
    return now >= tonumber(p[8])
  end
  return now >= tonumber(p[3])
end

if op == 'begin' then
  -- ARGV[2] nonce, ARGV[3] ttl ms, ARGV[4] kt ms, ARGV[5] lines, ARGV[6]
  -- kind, ARGV[7] dir, ARGV[8] "1" when an attempt under way with the
  -- same lines may be taken over (a Reserve's retry), ARGV[9] how long an
  -- attempt may take, ms. Replies {"ok"}, {"dup"}, {"busy"} or {"took",
  -- the earlier attempt's nonce, its lines}: the record keeps those as on
  -- and ol until the caller (or Sweep) has released that attempt's lines
  -- and said so ("oldgone"); meanwhile it takes over no other attempt.
  local took
  if p[1] == 'reserving' then
    if p[9] or (not due() and not (ARGV[8] == '1' and p[4] == ARGV[5])) then
      return {'busy'}
    end
    took = p[2]
    redis.call('HSET', rec, 'on', p[2], 'ol', p[4])
  elseif p[1] == 'released' and p[5] ~= 'h' then
    return {'busy'} -- a lines call that did not take effect, not yet finished
  elseif p[1] then
    return {'dup'}
  end
  local ad = now + tonumber(ARGV[9])
  redis.call('HSET', rec, 'st', 'reserving', 'n', ARGV[2], 'dl', now + tonumber(ARGV[3]), 'ad', ad, 'ln', ARGV[5],
    'kind', ARGV[6], 'dir', ARGV[7], 'kt', ARGV[4])
  redis.call('PERSIST', rec)
  redis.call('ZADD', idx, ad, rec)
  if took then
    return {'took', took, p[4]}
  end
  return {'ok'}
end

if op == 'peek' then
  -- Replies {st, n, ln, kind, dir, "1" when past dl, on, ol} or
  -- {"absent"}; a finished record has only st and kind ({st, "", "",
  -- kind, "", "0", "", ""}).
  if not p[1] then
    return {'absent'}
  elseif not p[2] then
    return {p[1], '', '', p[5] or '', '', '0', '', ''}
  end
  return {p[1], p[2], p[4], p[5], p[6], due() and '1' or '0', p[9] or '', p[10] or ''}
end

if op == 'oldgone' then
  -- The lines of the attempt of nonce ARGV[2], taken over, are released.
  if p[9] == ARGV[2] then
    redis.call('HDEL', rec, 'on', 'ol')
  end
  return {'ok'}
end

if op == 'cancel' then
  -- A Cancel: a hold held (or still being reserved) is released. ARGV[2]
  -- grace ms. Replies {st before, n, ln} or {"absent"}.
  if not p[1] then
    return {'absent'}
  end
  if p[1] == 'held' or p[1] == 'reserving' then
    redis.call('HSET', rec, 'st', 'released')
    redis.call('ZADD', idx, now + tonumber(ARGV[2]), rec)
  end
  return {p[1], p[2] or '', p[4] or ''}
end

-- The ops below act for the attempt of nonce ARGV[2] only: another's
-- gets {"gone"}.
if not p[1] or p[2] ~= ARGV[2] then
  return {'gone'}
end

if op == 'commit' then
  -- From state ARGV[3] to ARGV[4]; ARGV[5] grace ms, after which Sweep
  -- finishes a confirmed record whose lines its caller did not end; a
  -- hold, held, falls due at dl. Replies {"ok"} or {the state found}.
  if p[1] ~= ARGV[3] then
    return {p[1]}
  end
  redis.call('HSET', rec, 'st', ARGV[4])
  if ARGV[4] == 'confirmed' then
    redis.call('ZADD', idx, now + tonumber(ARGV[5]), rec)
  else
    redis.call('ZADD', idx, p[3], rec)
  end
  return {'ok'}
end

if op == 'abort' then
  -- Releases a record held or reserving; with ARGV[3] "1" only once past
  -- its time. ARGV[4] grace ms. Replies {"ok", the state it was in},
  -- {"live"} or {the state found}.
  if p[1] ~= 'held' and p[1] ~= 'reserving' then
    return {p[1]}
  end
  if ARGV[3] == '1' and not due() then
    return {'live'}
  end
  redis.call('HSET', rec, 'st', 'released')
  redis.call('ZADD', idx, now + tonumber(ARGV[4]), rec)
  return {'ok', p[1]}
end

if op == 'finish' then
  -- Every line has ended: the record leaves the index and is kept kt ms,
  -- with its state and kind alone, a hold's id and a keyed call's key
  -- staying used; an unkeyed call, a lines call that did not take effect
  -- and, with ARGV[3] "drop", a hold that never held leave nothing.
  redis.call('ZREM', idx, rec)
  if p[5] == 'r' or (p[5] == 'k' and p[1] == 'released') or (ARGV[3] == 'drop' and p[1] ~= 'confirmed') then
    redis.call('DEL', rec)
  else
    redis.call('HDEL', rec, 'n', 'dl', 'ad', 'ln', 'dir', 'kt')
    redis.call('PEXPIRE', rec, p[7])
  end
  return {'ok'}
end

return redis.error_reply('redis_order.lua: unknown op ' .. tostring(op))
