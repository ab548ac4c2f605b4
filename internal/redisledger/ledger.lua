-- The movement ledger (redisledger.go), put before the scripts that move
-- stock (luascript's, redisstore's) when they keep one, after a line that
-- sets MAXLEN (0: keep every entry). The scripts without a ledger start
-- with "local ledger" instead, so that every "if ledger" is false.
--
-- ledger.add(k, kind, units, available, key, ref, hold) records an entry
-- in the stream of the SKU of k (any key of the SKU: PREFIX{tag}:X:SKU),
-- the SKU's key PREFIX{tag}:l:SKU. An entry is a record of four lines:
-- "KIND UNITS AVAILABLE" (the stock after it), then the call's key,
-- reference and hold id, "" for none (none of them holds a control
-- character). A stream entry has one field, e: a line "HELD SOLD", the
-- units held and sold after its last record, counted from the SKU's first
-- record (the next script that adds to the stream carries them on; the
-- reader works back from them to each record's), then its r records,
-- joined by newlines. Its id ms-seq is the position of
-- its last record, the others having seq-r+1 to seq-1: the script picks
-- the id itself, the Redis clock's millisecond, or the last id's when that
-- is not earlier, with a seq past the last id's. So positions grow along
-- the SKU's history.
--
-- Each add writes its stream entry at once (XADD), unless ledger.buffer()
-- was called: then the records wait, in order, for ledger.flush(), which
-- writes each stream's as one entry (batch.lua: one XADD per SKU per
-- batch, not per call). While they wait, a run of records of one kind,
-- reduce or return, of the same units, each with no key, reference or
-- hold and following the one before (its available that one's less or
-- plus the units), is one record: "KIND UNITS AVAILABLE N" (N >= 2, the
-- last one's available), then three empty lines. A stream entry's r is
-- the number of records once runs are counted out.
local ledger = (function(maxlen)
  local numfmt = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f'
  local rfmt = '%s ' .. numfmt .. ' ' .. numfmt .. '\n%s\n%s\n%s'
  local idfmt = numfmt .. '-' .. numfmt
  local runfmt = '%s ' .. numfmt .. ' ' .. numfmt .. ' ' .. numfmt .. '\n\n\n'
  local cfmt = numfmt .. ' ' .. numfmt .. '\n'
  -- by stream key: {held, sold, last ms, last seq, lines waiting, the run
  -- waiting {kind, units, available, n} or nil, records waiting}
  local streams = {}
  local order = {} -- the streams with records waiting, in order
  local buffering, now = false, nil

  local function stream(k)
    local i = string.find(k, '}', 1, true)
    return string.sub(k, 1, i) .. ':l:' .. string.sub(k, i + 4)
  end

  local function state(sk)
    local c = streams[sk]
    if c then
      return c
    end
    c = {0, 0, 0, 0}
    local e = redis.call('XREVRANGE', sk, '+', '-', 'COUNT', 1)[1]
    if e then
      local ms, seq = string.match(e[1], '^(%d+)-(%d+)$')
      local h, s = string.match(e[2][2], '^(%S+) (%S+)\n')
      c = {tonumber(h), tonumber(s), tonumber(ms), tonumber(seq)}
    end
    streams[sk] = c
    return c
  end

  -- write appends recs, the lines of r >= 1 records, to stream sk as one
  -- entry.
  local function write(sk, c, recs, r)
    if not now then
      local t = redis.call('TIME')
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    end
    local ms, seq = c[3], c[4] + r
    if now > ms then
      ms, seq = now, r - 1
    elseif seq > 999999 then -- positions are ms * 1e6 + seq
      ms, seq = ms + 1, r - 1
    end
    c[3], c[4] = ms, seq
    local id = string.format(idfmt, ms, seq)
    local e = string.format(cfmt, c[1], c[2]) .. table.concat(recs, '\n')
    if maxlen > 0 then
      redis.call('XADD', sk, 'MAXLEN', '~', maxlen, id, 'e', e)
    else
      redis.call('XADD', sk, id, 'e', e)
    end
  end

  -- close appends the run waiting in c, if any, to its lines waiting.
  local function close(c)
    local run = c[6]
    if not run then
      return
    end
    if run[4] == 1 then
      c[5][#c[5] + 1] = string.format(rfmt, run[1], run[2], run[3], '', '', '')
    else
      c[5][#c[5] + 1] = string.format(runfmt, run[1], run[2], run[3], run[4])
    end
    c[6] = nil
  end

  local sks = {} -- stream keys by the key they were asked for
  local function add(k, kind, units, available, key, ref, hold)
    local sk = sks[k]
    if not sk then
      sk = stream(k)
      sks[k] = sk
    end
    local c = state(sk)
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
    local a = tonumber(available)
    key, ref, hold = key or '', ref or '', hold or ''
    if not buffering then
      write(sk, c, {string.format(rfmt, kind, u, a, key, ref, hold)}, 1)
      return
    end
    if not c[5] then
      c[5], c[7] = {}, 0
      order[#order + 1] = sk
    end
    c[7] = c[7] + 1
    local run = c[6]
    local plain = key == '' and ref == '' and hold == '' and (kind == 'reduce' or kind == 'return')
    if plain and run and run[1] == kind and run[2] == u and a == run[3] + (kind == 'reduce' and -u or u) then
      run[3], run[4] = a, run[4] + 1
      return
    end
    close(c)
    if plain then
      c[6] = {kind, u, a, 1}
    else
      c[5][#c[5] + 1] = string.format(rfmt, kind, u, a, key, ref, hold)
    end
  end

  local function buffer()
    buffering = true
  end

  local function flush()
    for _, sk in ipairs(order) do
      local c = streams[sk]
      close(c)
      write(sk, c, c[5], c[7])
      c[5], c[7] = nil, nil
    end
    order = {}
  end

  -- hold returns the hold id of order record rec (PREFIX{tag}:o:h:ID), or
  -- nil for the record of a lines call.
  local function hold(rec)
    return rec and string.match(rec, '^[^}]*}:o:h:(.*)$')
  end

  return {add = add, buffer = buffer, flush = flush, hold = hold}
end)(MAXLEN)
