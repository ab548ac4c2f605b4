-- The order calls (orders.go), after orders_holds.lua. ARGV[1] names the
-- operation; each one runs on one Redis, or on one Redis Cluster slot, and
-- is atomic there. Replies are arrays whose first element is a status.
--
-- Lines ops take n lines: KEYS[1..n] the stock keys, KEYS[n+1..2n] their
-- holds sets, KEYS[2n+1..3n] their held counters, then op-specific keys;
-- ARGV[2] is n and ARGV[3] MaxStock, quantities from ARGV[10]. A refusal
-- replies {"short", i, available, ...} (1-based line, available stock) or
-- {"notfound", i}, having changed nothing but the release of expired holds.
-- With a ledger (ledger.lua), the lines and part ops take the call's key
-- and reference after the quantities, at ARGV[10+n] and ARGV[11+n].
local op = ARGV[1]
local H = holds()
local FAR, now_ms, sku_key, mark, end_part, release_due = H.FAR, H.now_ms, H.sku_key, H.mark, H.end_part,
  H.release_due

-- check releases the expired holds of the n SKUs, then checks their lines
-- for direction dir ("reduce" or "return"); it returns nil when all fit.
local function check(n, dir)
  for i = 1, n do
    release_due(KEYS[n + i])
  end
  local max = tonumber(ARGV[3])
  local short
  for i = 1, n do
    local raw = redis.call('GET', KEYS[i])
    if not raw then
      return {'notfound', i}
    end
    local cur, q = tonumber(raw), tonumber(ARGV[9 + i])
    if not cur then
      return redis.error_reply('stock key ' .. KEYS[i] .. ' does not hold a number')
    end
    if (dir == 'reduce' and cur < q) or (dir == 'return' and q > max - cur) then
      short = short or {'short'}
      short[#short + 1] = i
      short[#short + 1] = raw
    end
  end
  return short
end

-- take moves the n lines out of the stock into part pk, held until score;
-- with a ledger, hold is the hold id of its reserve entries, or nil for
-- the reduce entries of a lines call.
local function take(n, pk, score, hold)
  for i = 1, n do
    local left = redis.call('DECRBY', KEYS[i], ARGV[9 + i])
    if ledger and hold then
      ledger.add(KEYS[i], 'reserve', ARGV[9 + i], left, '', '', hold)
    elseif ledger then
      ledger.add(KEYS[i], 'reduce', ARGV[9 + i], left, ARGV[10 + n], ARGV[11 + n])
    end
    redis.call('INCRBY', KEYS[2 * n + i], ARGV[9 + i])
    redis.call('ZADD', KEYS[n + i], score, pk)
    mark(KEYS[n + i])
  end
end

if op == 'lines' then
  -- ReduceLines/ReturnLines in one step. KEYS[3n+1]: the call's record
  -- when keyed. ARGV[4] direction, ARGV[5] key TTL ms, ARGV[6] "1" when
  -- keyed.
  local n = tonumber(ARGV[2])
  local rec = ARGV[6] == '1' and KEYS[3 * n + 1]
  if rec then
    local st = redis.call('HGET', rec, 'st')
    if st == 'reserving' then
      return {'busy'}
    elseif st and st ~= 'released' then
      return {'dup'}
    end
  end
  local r = check(n, ARGV[4])
  if r then
    return r
  end
  for i = 1, n do
    local left
    if ARGV[4] == 'reduce' then
      left = redis.call('DECRBY', KEYS[i], ARGV[9 + i])
    else
      left = redis.call('INCRBY', KEYS[i], ARGV[9 + i])
    end
    if ledger then
      ledger.add(KEYS[i], ARGV[4], ARGV[9 + i], left, ARGV[10 + n], ARGV[11 + n])
    end
  end
  if rec then
    redis.call('DEL', rec)
    redis.call('HSET', rec, 'st', 'confirmed')
    redis.call('PEXPIRE', rec, ARGV[5])
  end
  return {'ok'}
end

if op == 'reserve' then
  -- Reserve in one step; the record is its only part. KEYS[3n+1] the
  -- record, KEYS[3n+2] the sweep index. ARGV[4] ttl ms, ARGV[5] key TTL
  -- ms, ARGV[6] nonce, ARGV[7] ln, ARGV[8] the SKU lines ("QTY SKU\n").
  local n = tonumber(ARGV[2])
  local rec, idx = KEYS[3 * n + 1], KEYS[3 * n + 2]
  local old = redis.call('HMGET', rec, 'st', 'dl', 'self')
  if old[1] == 'held' and old[3] == '1' and now_ms() >= tonumber(old[2]) then
    end_part(rec, 'release', tonumber(old[2])) -- it ended at dl: kept until dl + key TTL
  end
  if old[1] and redis.call('EXISTS', rec) == 1 then
    return {'dup'}
  end
  local r = check(n, 'reduce')
  if r then
    return r
  end
  local dl = now_ms() + tonumber(ARGV[4])
  take(n, rec, dl, ledger and ledger.hold(rec))
  redis.call('HSET', rec, 'st', 'held', 'dl', dl, 'n', ARGV[6], 'ln', ARGV[7], 'sl', ARGV[8],
    'k', 'r', 'x', idx, 'p', '1', 'self', '1', 'kt', ARGV[5])
  redis.call('ZADD', idx, dl, rec)
  return {'ok'}
end

if op == 'end' then
  -- Confirm (ARGV[2] "confirm") or Cancel ("cancel") of hold record
  -- KEYS[1]. A one-slot record ends here, its lines' keys (named in the
  -- record, all in its slot) reached from it; a multi-slot one replies
  -- {"cross", state, nonce, SKU lines, KIND:ID} for the caller to go on.
  local rec = KEYS[1]
  local p = redis.call('HMGET', rec, 'st', 'dl', 'self', 'n', 'sl', 'ki')
  if not p[1] then
    return {'notfound'}
  elseif p[3] ~= '1' then
    return {'cross', p[1], p[4], p[5], p[6]}
  end
  local confirm = ARGV[2] == 'confirm'
  if p[1] == 'confirmed' then
    return {confirm and 'dup' or 'confirmed'}
  elseif p[1] == 'released' then
    return {confirm and 'released' or 'ok'}
  end
  local now, dl = now_ms(), tonumber(p[2])
  if now >= dl then
    end_part(rec, 'release', dl)
    return {confirm and 'released' or 'ok'}
  end
  end_part(rec, confirm and 'sell' or 'release', now, 'cancel')
  return {'ok'}
end

if op == 'sweep' then
  -- Releases at most ARGV[2] parts due in sweep index KEYS[1]. Pinned
  -- parts are listed for the caller to settle with their records, and
  -- put back ARGV[3] ms. Replies {"ok", released, more, parts left,
  -- pinned...}.
  local idx = KEYS[1]
  local now = now_ms()
  local due = redis.call('ZRANGEBYSCORE', idx, '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
  local res = {'ok', 0, #due == tonumber(ARGV[2]) and 1 or 0, 0}
  for _, pk in ipairs(due) do
    local p = redis.call('HMGET', pk, 'st', 'dl', 'p')
    if p[1] == 'held' then
      if end_part(pk, 'release', tonumber(p[2])) and p[3] == '1' then
        res[2] = res[2] + 1
      end
    elseif p[1] == 'pinned' then
      redis.call('ZADD', idx, now + tonumber(ARGV[3]), pk)
      res[#res + 1] = pk
    else
      redis.call('ZREM', idx, pk)
    end
  end
  res[4] = redis.call('ZCARD', idx)
  return res
end

if op == 'mark' then
  -- Names Cluster slot ARGV[2] in the set of slots to sweep, KEYS[1],
  -- before a part is made there.
  redis.call('ZADD', KEYS[1], now_ms(), ARGV[2])
  return {'ok'}
end

if op == 'unmark' then
  -- Takes slot ARGV[2] out of the set KEYS[1] (its sweep index was found
  -- empty) unless a writer named it in the last ARGV[3] ms.
  local at = redis.call('ZSCORE', KEYS[1], ARGV[2])
  if at and tonumber(at) < now_ms() - tonumber(ARGV[3]) then
    redis.call('ZREM', KEYS[1], ARGV[2])
  end
  return {'ok'}
end

-- The ops below are the steps of an order across Cluster slots: a record
-- in the slot of its id, a part in each slot of its lines.

if op == 'part' then
  -- Makes part KEYS[3n+1] of record ARGV[8], in sweep index KEYS[3n+2].
  -- ARGV[4] kind: "hold" (held until its ttl passes), "reduce" (pinned:
  -- units taken, ended by its record), "return" (pinned, nothing taken);
  -- ARGV[5] ttl ms, ARGV[6] nonce, ARGV[7] ln, ARGV[9] "1" on the first
  -- part.
  local n = tonumber(ARGV[2])
  local pk, idx, kind = KEYS[3 * n + 1], KEYS[3 * n + 2], ARGV[4]
  if redis.call('EXISTS', pk) == 1 then
    return {'exists'}
  end
  local r = check(n, kind == 'return' and 'return' or 'reduce')
  if r then
    return r
  end
  local dl = now_ms() + tonumber(ARGV[5])
  if kind ~= 'return' then
    take(n, pk, kind == 'hold' and dl or FAR, ledger and (kind == 'hold' and ledger.hold(ARGV[8]) or nil))
  end
  redis.call('HSET', pk, 'st', kind == 'hold' and 'held' or 'pinned', 'dl', dl, 'n', ARGV[6], 'ln', ARGV[7],
    'k', kind == 'return' and 't' or 'r', 'x', idx, 'p', ARGV[9], 'rec', ARGV[8])
  if ledger and kind ~= 'hold' then
    redis.call('HSET', pk, 'lk', ARGV[10 + n], 'lr', ARGV[11 + n])
  end
  redis.call('ZADD', idx, dl, pk)
  return {'ok'}
end

if op == 'pin' then
  -- Pins held part KEYS[1] of nonce ARGV[2] for a Confirm: from now on
  -- only its record ends it. A part past its time is released instead.
  -- ARGV[3]: how long after dl Sweep may settle it, ms.
  local pk = KEYS[1]
  local p = redis.call('HMGET', pk, 'st', 'dl', 'n', 'ln', 'x')
  if not p[1] or p[3] ~= ARGV[2] then
    return {'gone'}
  elseif p[1] == 'pinned' then
    return {'ok'}
  end
  local dl = tonumber(p[2])
  if now_ms() >= dl then
    end_part(pk, 'release', dl)
    return {'expired'}
  end
  redis.call('HSET', pk, 'st', 'pinned')
  for sk in string.gmatch(p[4], '%d+ ([^\n]*)\n') do
    local ek = sku_key(sk, 'e')
    redis.call('ZADD', ek, 'XX', FAR, pk)
    mark(ek)
  end
  redis.call('ZADD', p[5], dl + tonumber(ARGV[3]), pk)
  return {'ok'}
end

if op == 'endpart' then
  -- Ends part KEYS[1] of nonce ARGV[2]: ARGV[3] "sell", "release", or
  -- "cancel" (a release by a Cancel: the ledger's kind).
  local pk = KEYS[1]
  if redis.call('HGET', pk, 'n') ~= ARGV[2] then
    return {'gone'}
  end
  if ARGV[3] == 'cancel' then
    end_part(pk, 'release', 0, 'cancel')
  else
    end_part(pk, ARGV[3], 0)
  end
  return {'ok'}
end

-- Record ops: KEYS[1] the record, ARGV[2] the order's nonce.

if op == 'begin' then
  -- Starts order record KEYS[1]: ARGV[3] ttl ms, ARGV[4] key TTL ms,
  -- ARGV[5] the SKU lines, ARGV[6] "hold", "keyed" or "unkeyed", ARGV[7]
  -- KIND:ID. Replies "ok", "dup" (the id is taken), {"busy", nonce,
  -- lines, kind:id} (another attempt is under way, or died, within its
  -- time) or {"stale", nonce, lines, kind:id} (an attempt whose time
  -- passed before it finished): the caller ends a stale attempt first,
  -- and a busy one when it takes it over (a Reserve's retry).
  local rec = KEYS[1]
  local p = redis.call('HMGET', rec, 'st', 'n', 'dl', 'sl', 'ki')
  local now = now_ms()
  if p[1] == 'reserving' then
    if now < tonumber(p[3]) then
      return {'busy', p[2], p[4], p[5]}
    end
    return {'stale', p[2], p[4], p[5]}
  elseif p[1] == 'released' and ARGV[6] ~= 'hold' then
    redis.call('DEL', rec) -- a lines call that did not take effect
  elseif p[1] then
    return {'dup'}
  end
  redis.call('HSET', rec, 'st', 'reserving', 'n', ARGV[2], 'dl', now + tonumber(ARGV[3]), 'sl', ARGV[5],
    'kt', ARGV[4], 'kind', ARGV[6], 'ki', ARGV[7])
  redis.call('PEXPIRE', rec, tonumber(ARGV[3]) + tonumber(ARGV[4]))
  return {'ok'}
end

local rec = KEYS[1]
local p = redis.call('HMGET', rec, 'st', 'n', 'dl', 'kt', 'kind')
if p[2] ~= ARGV[2] then
  return {'gone'}
end

if op == 'commit' then
  -- Moves the record from state ARGV[3] to ARGV[4] ("held" or
  -- "confirmed"). Replies "ok", or the state it found.
  if p[1] ~= ARGV[3] then
    return {p[1]}
  end
  redis.call('HSET', rec, 'st', ARGV[4])
  if ARGV[4] == 'confirmed' then
    redis.call('PERSIST', rec) -- kept until every part is sold
  end
  return {'ok'}
end

if op == 'abort' then
  -- Releases the record unless it is confirmed; with ARGV[3] "1" only
  -- once its time has passed; with ARGV[4] only from that state. Replies
  -- "ok" (released now), "live", or the state it found.
  if p[1] == 'confirmed' or p[1] == 'released' or (ARGV[4] ~= '' and p[1] ~= ARGV[4]) then
    return {p[1]}
  end
  if ARGV[3] == '1' and now_ms() < tonumber(p[3]) then
    return {'live'}
  end
  redis.call('HSET', rec, 'st', 'released')
  redis.call('PEXPIRE', rec, p[4])
  return {'ok'}
end

if op == 'finish' then
  -- Every part has ended: keep the record for the key TTL; an unkeyed
  -- lines call, or one that did not take effect, leaves nothing; an
  -- order that never took effect (ARGV[3] "drop") frees its id.
  if p[5] == 'unkeyed' or (p[5] == 'keyed' and p[1] == 'released') or
      (ARGV[3] == 'drop' and (p[1] == 'reserving' or p[1] == 'released')) then
    redis.call('DEL', rec)
  elseif p[1] == 'confirmed' or p[1] == 'released' then
    redis.call('PEXPIRE', rec, p[4])
  end
  return {'ok'}
end

return redis.error_reply('orders.lua: unknown op ' .. tostring(op))
