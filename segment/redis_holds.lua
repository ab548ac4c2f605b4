-- Holds on a segment (package segment, Redis): prepended to
-- redis_take.lua, redis_arrive.lua and redis_line.lua. A line of a hold
-- or of a multi-SKU call takes its units at one segment, its home, as a
-- keyed Reduce (or adds them, a Return) whose record, in the home's slot,
-- says where the line stands:
--   "REM"      taken (or given) by a lines call: its order record decides
--   "REM h Q"  held: Q units counted in the segment's h and listed in its
--              holds set, scored by when they fall due on this server's
--              clock; kept until the line ends
--   "REM p Q"  pinned by a Confirm: no longer due; only its order ends it
--   "REM r"    released: the units are back in a
--   "REM s"    sold
--   "0 v"      void: a release found no take, and a late take of the line
--              finds this record and does nothing
-- A line's take is sent once (never retried), so an ended record is kept
-- only ENDED ms, for the ends of the same line that run at the same time
-- (a Cancel and a Sweep); a void one is kept the key TTL, for a take that
-- was under way when the release came.
-- The holds set of segment PREFIX{tag}:gI:SKU is PREFIX{tag}:e:gI:SKU; the
-- segment's field m holds its earliest score, present exactly when the set
-- is not empty. A segment's v counts its adds: a release adds.
local FAR = 9007199254740991
local ENDED = 10000
local numfmt = string.format('%d', 2 ^ 53) == '9007199254740992' and '%d' or '%.0f'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function holds_key(seg)
  local i = string.find(seg, '}', 1, true)
  return string.sub(seg, 1, i) .. ':e' .. string.sub(seg, i + 1)
end

-- mark sets segment seg's m after its holds set ek changed.
local function mark(seg, ek)
  local first = redis.call('ZRANGE', ek, 0, 0, 'WITHSCORES')
  if first[1] then
    redis.call('HSET', seg, 'm', first[2])
  else
    redis.call('HDEL', seg, 'm')
  end
end

-- end_line ends line record rk of segment seg: how 'release' gives its
-- units back (q: the units of a line taken by a lines call, which its
-- record does not hold), 'sell' keeps them sold. A record that is absent
-- becomes void (kept ttl ms) on a release. Returns true if it ended a
-- line.
local function end_line(seg, ek, rk, how, q, ttl)
  local rec = redis.call('GET', rk)
  if not rec then
    if how == 'release' then
      redis.call('SET', rk, '0 v', 'PX', ttl)
    end
    return false
  end
  local rem, st, hq = string.match(rec, '^(%d+) ?(%a?) ?(%d*)$')
  if st == 'h' or st == 'p' then
    q = tonumber(hq)
    redis.call('HINCRBY', seg, 'h', string.format(numfmt, -q))
    redis.call('ZREM', ek, rk)
    mark(seg, ek)
  elseif st ~= '' or how == 'sell' then
    return false
  end
  if how == 'release' and redis.call('EXISTS', seg) == 1 then
    redis.call('HINCRBY', seg, 'a', string.format(numfmt, q))
    redis.call('HINCRBY', seg, 'v', 1)
  end
  redis.call('SET', rk, rem .. (how == 'release' and ' r' or ' s'), 'PX', math.min(tonumber(ttl), ENDED))
  return true
end

-- release_due releases the held lines of segment seg due by now.
local function release_due(seg, ek, now, ttl)
  for _, rk in ipairs(redis.call('ZRANGEBYSCORE', ek, '-inf', now)) do
    if not end_line(seg, ek, rk, 'release', 0, ttl) then
      redis.call('ZREM', ek, rk)
      mark(seg, ek)
    end
  end
end

-- hold_line records, after a take of q units that left rem, that rk's line
-- is held until hold ms from now.
local function hold_line(seg, ek, rk, rem, q, hold, now)
  redis.call('SET', rk, string.format(numfmt, rem) .. ' h ' .. string.format(numfmt, q))
  redis.call('ZADD', ek, now + hold, rk)
  redis.call('HINCRBY', seg, 'h', string.format(numfmt, q))
  mark(seg, ek)
end

