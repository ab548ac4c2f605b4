-- The movement ledger (ledger.go), put before orders_holds.lua in the
-- scripts of a Manager made WithLedger, after a line that sets MAXLEN (0:
-- keep every entry). The scripts of a Manager without a ledger start with
-- "local ledger" instead, so that every "if ledger" is false.
--
-- ledger.add(k, kind, units, available, key, ref, hold) appends an entry to
-- the stream of the SKU of k (any key of the SKU: PREFIX{tag}:X:SKU), the
-- SKU's key PREFIX{tag}:l:SKU, with XADD *: Redis gives it an id ms-seq
-- greater than the stream's last, so the ids order the SKU's history. An
-- entry holds its kind (k), units (u), the stock after it (a), the units
-- held (h) and sold (s) after it, counted from the SKU's first entry and
-- carried from the stream's last entry, the call's key (i), reference (r)
-- and hold id (o), "" for none: always the same fields, which a stream
-- stores once per node.
local ledger = (function(maxlen)
  local numfmt = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f'
  local last = {} -- by stream: {held, sold} after its last entry

  local function stream(k)
    local i = string.find(k, '}', 1, true)
    return string.sub(k, 1, i) .. ':l:' .. string.sub(k, i + 4)
  end

  local function counters(sk)
    local c = last[sk]
    if c then
      return c
    end
    c = {0, 0}
    local e = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)[1]
    if e then
      local f = e[2]
      for i = 1, #f, 2 do
        if f[i] == 'h' then
          c[1] = tonumber(f[i + 1])
        elseif f[i] == 's' then
          c[2] = tonumber(f[i + 1])
        end
      end
    end
    last[sk] = c
    return c
  end

  local function add(k, kind, units, available, key, ref, hold)
    local sk = stream(k)
    local c = counters(sk)
    local u = tonumber(units)
    if kind == 'reduce' then
      c[2] = c[2] + u
    elseif kind == 'return' then
      c[2] = c[2] - u
    elseif kind == 'reserve' then
      c[1] = c[1] + u
    elseif kind == 'confirm' then
      c[1], c[2] = c[1] - u, c[2] + u
    elseif kind == 'cancel' or kind == 'expire' then
      c[1] = c[1] - u
    end
    local f = {'k', kind, 'u', string.format(numfmt, u), 'a', string.format(numfmt, tonumber(available)),
      'h', string.format(numfmt, c[1]), 's', string.format(numfmt, c[2]), 'i', key or '', 'r', ref or '',
      'o', hold or ''}
    if maxlen > 0 then
      redis.call('XADD', sk, 'MAXLEN', '~', maxlen, '*', unpack(f))
    else
      redis.call('XADD', sk, '*', unpack(f))
    end
  end

  -- hold returns the hold id of order record rec (PREFIX{tag}:o:h:ID), or
  -- nil for the record of a lines call.
  local function hold(rec)
    return rec and string.match(rec, '}:o:h:(.*)$')
  end

  return {add = add, hold = hold}
end)(MAXLEN)
