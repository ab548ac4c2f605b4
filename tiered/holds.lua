-- Shared by the scripts that touch holds (move.lua, batch.lua, parts.lua):
-- prepended to each, so that every call that moves a SKU first releases its
-- expired holds in the same atomic step.
-- A SKU's holds (parts: the lines of one order on the SKU) live in its state
-- hash (see move.lua), one field per part, P:NONCE:KIND:ID = "q deadline
-- pinned", with h (units held), x (the earliest deadline of its unpinned
-- parts, absent when none) and k (parts pinned by a Confirm under way).
-- A part's units left the allotment a when it was made; releasing it gives
-- them back, selling it (Confirm) does not. Each change is journaled with
-- the SKU's generation n, d (units taken from a), s (units sold) and h
-- (change of held units), so that returned == s + h - d.
-- LEDGER (set by the line each script begins with, see ledger.go): the
-- journal entry also carries l, the ledger records of its moves, four
-- lines each: "KIND UNITS", the key, the reference, the hold id.

local function hnow()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(v)
  return string.format('%.0f', v)
end

-- keyitem returns a keyed move's item in its journal entry's k field
-- (items joined by newlines, which a key never holds): "q rem key", q the
-- units taken (negative for a Return), rem the remaining stock the call
-- returned, key the idempotency key, read from the name of its record,
-- PREFIX{tag}:k:DIR:LEN:SKU:KEY (a prefix holds no brace).
local function keyitem(rec, q, rem)
  local t = string.find(rec, '}', 1, true)
  local d, l = string.match(rec, '^(%a+):(%d+):', t + 4)
  return fmt(q) .. ' ' .. fmt(rem) .. ' ' .. string.sub(rec, t + 7 + #d + #l + tonumber(l))
end

-- parse returns a part's units, deadline and pinned flag.
local function parse(v)
  local q, dl, pin = string.match(v, '^(%d+) (%d+) (%d)$')
  return tonumber(q), tonumber(dl), pin == '1'
end

-- release_due releases the unpinned parts of state whose deadline is at or
-- before now, journals their units in one entry, resets x, and returns how
-- many it released.
local function release_due(state, journal, now)
  local x = redis.call('HGET', state, 'x')
  if not x or tonumber(x) > now then
    return 0
  end
  local all = redis.call('HGETALL', state)
  local sum, dead, nx, gen = 0, {}, nil, nil
  local recs = {} -- with LEDGER: the expire records of holds (parts of kind h)
  for i = 1, #all, 2 do
    local f = all[i]
    if f == 'n' then
      gen = all[i + 1]
    elseif string.sub(f, 1, 2) == 'P:' then
      local q, dl, pin = parse(all[i + 1])
      if not pin then
        if dl <= now then
          sum = sum + q
          dead[#dead + 1] = f
          if LEDGER then
            local kind, id = string.match(f, '^P:[^:]*:(%a):(.*)$')
            if kind == 'h' then
              recs[#recs + 1] = 'expire ' .. fmt(q) .. '\n\n\n' .. id
            end
          end
        elseif not nx or dl < nx then
          nx = dl
        end
      end
    end
  end
  for i = 1, #dead, 100 do
    redis.call('HDEL', state, unpack(dead, i, math.min(i + 99, #dead)))
  end
  if sum > 0 then
    redis.call('HINCRBY', state, 'a', fmt(sum))
    redis.call('HINCRBY', state, 'h', fmt(-sum))
    if #recs > 0 then
      redis.call('XADD', journal, '*', 'n', gen, 'd', fmt(-sum), 's', '0', 'h', fmt(-sum), 'l', table.concat(recs, '\n'))
    else
      redis.call('XADD', journal, '*', 'n', gen, 'd', fmt(-sum), 's', '0', 'h', fmt(-sum))
    end
  end
  if nx then
    redis.call('HSET', state, 'x', fmt(nx))
  else
    redis.call('HDEL', state, 'x')
  end
  return #dead
end
