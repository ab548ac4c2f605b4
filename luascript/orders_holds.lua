-- Holds: the part of the scripts shared by move.lua and orders.lua, run
-- before either (luascript.go and orders.go prepend it). It defines one
-- function, holds(), which returns the library; a call on a SKU without
-- holds never calls it.
--
-- A part is the lines of one hold (or one multi-SKU call) in one Redis
-- Cluster slot, in a hash: st ("held": expires at dl on this server's
-- clock; "pinned": a Confirm or a lines call is deciding, only its order
-- record may end it), dl, n (the order's nonce), ln (lines, "QTY STOCKKEY\n"
-- each), k ("r": units taken from the stock into held; "t": a pending
-- return, nothing taken), x (its sweep index), p ("1" on the order's first
-- part, which Sweep counts), self ("1" when the part is the order record
-- itself: one slot, one script), kt (the key TTL, ms, on a self record).
-- Every SKU line of a reducing part is in the SKU's holds set (score: dl,
-- or FAR while pinned) and its units are counted in the SKU's held
-- counter. The SKU's hold marker holds the earliest score of its holds
-- set and exists exactly when the set does: move.lua reads it in the same
-- MGET as the stock. A part's keys all share its slot, so a script may
-- reach the keys its lines name.
local function holds()
  local FAR = 9007199254740991

  local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end

  -- sku_key returns the key of kind ("s" stock, "e" holds set, "h" held,
  -- "m" hold marker) of the SKU of k, any of those keys: PREFIX{tag}:X:SKU
  -- (the prefix has no brace).
  local function sku_key(k, kind)
    local i = string.find(k, '}', 1, true)
    return string.sub(k, 1, i) .. ':' .. kind .. ':' .. string.sub(k, i + 4)
  end

  -- mark sets the hold marker of holds set ek after ek changed.
  local function mark(ek)
    local first = redis.call('ZRANGE', ek, 0, 0, 'WITHSCORES')
    if first[1] then
      redis.call('SET', sku_key(ek, 'm'), first[2])
    else
      redis.call('DEL', sku_key(ek, 'm'))
    end
  end

  -- entries returns what the ledger (ledger.lua) records of part pk, p[5]
  -- being its self field: the hold id (nil for a lines call's part), and
  -- the lines call's key and reference.
  local function entries(pk, self)
    local q = redis.call('HMGET', pk, 'rec', 'lk', 'lr')
    return {ledger.hold(self == '1' and pk or q[1]), q[2], q[3]}
  end

  -- record adds the ledger entry of line q of stock key sk of a part ended
  -- as how, left the stock after it (nil: not moved), lk the kind of a
  -- hold's release ("cancel"; "expire" when nil). A lines call's part
  -- records its reduce when made (orders.lua) and its return when sold:
  -- releasing the first gives the units back as a return.
  local function record(lg, how, lk, k, q, sk, left)
    if lg[1] and k == 'r' then
      local kind = how == 'sell' and 'confirm' or lk or 'expire'
      ledger.add(sk, kind, q, left or redis.call('GET', sk), '', '', lg[1])
    elseif left then
      ledger.add(sk, 'return', q, left, lg[2], lg[3])
    end
  end

  -- end_part ends part pk if it is held or pinned: how "release" gives its
  -- units back (drops a pending return), "sell" keeps them sold (applies a
  -- pending return). A self record stays, as "released" or "confirmed",
  -- until ended + its key TTL. Returns true if it ended the part. lk: see
  -- record.
  local function end_part(pk, how, ended, lk)
    local p = redis.call('HMGET', pk, 'st', 'ln', 'k', 'x', 'self', 'kt')
    if p[1] ~= 'held' and p[1] ~= 'pinned' then
      return false
    end
    local lg = ledger and entries(pk, p[5])
    for q, sk in string.gmatch(p[2], '(%d+) ([^\n]*)\n') do
      local left
      if p[3] == 'r' then
        local ek, hk = sku_key(sk, 'e'), sku_key(sk, 'h')
        redis.call('ZREM', ek, pk)
        mark(ek)
        if redis.call('DECRBY', hk, q) <= 0 then
          redis.call('DEL', hk)
        end
        if how == 'release' then
          left = redis.call('INCRBY', sk, q)
        end
      elseif how == 'sell' then
        left = redis.call('INCRBY', sk, q)
      end
      if lg then
        record(lg, how, lk, p[3], q, sk, left)
      end
    end
    redis.call('ZREM', p[4], pk)
    if p[5] == '1' then
      redis.call('HSET', pk, 'st', how == 'release' and 'released' or 'confirmed')
      redis.call('PEXPIREAT', pk, ended + tonumber(p[6]))
    else
      redis.call('DEL', pk)
    end
    return true
  end

  -- release_due releases the parts in holds set ek whose time has come,
  -- given the earliest score first (the hold marker's value) if known.
  -- TIME is read only when some part is not pinned. Returns how many it
  -- released.
  local function release_due(ek, first)
    if not first then
      first = redis.call('ZRANGE', ek, 0, 0, 'WITHSCORES')[2]
    end
    if not first or tonumber(first) >= FAR then
      return 0
    end
    local now = now_ms()
    if tonumber(first) > now then
      return 0
    end
    local n = 0
    for _, pk in ipairs(redis.call('ZRANGEBYSCORE', ek, '-inf', now)) do
      local dl = tonumber(redis.call('HGET', pk, 'dl'))
      if end_part(pk, 'release', dl or now) then
        n = n + 1
      else
        redis.call('ZREM', ek, pk) -- a stale entry
        mark(ek)
      end
    end
    return n
  end

  return {FAR = FAR, now_ms = now_ms, sku_key = sku_key, mark = mark, end_part = end_part,
    release_due = release_due}
end
