-- The steps of a line of an order on its home segment (package segment,
-- Redis; after redis_holds.lua).
-- KEYS[1]  the segment
-- KEYS[2]  the line's record (absent for "due")
-- ARGV[1]  "release", "sell", "pin" or "due"
-- ARGV[2]  how long to keep an ended line's record, in ms
-- ARGV[3]  the line's units (release of a line taken by a lines call)
-- release and sell reply 1 if they ended the line, 0 if it had ended (or,
-- released, was never taken); pin replies "ok" (pinned: it no longer
-- falls due), "expired" (it fell due: released now) or "gone" (ended);
-- due releases the segment's held lines that fell due and replies 1.
local seg, op, ttl = KEYS[1], ARGV[1], ARGV[2]
local ek = holds_key(seg)
if op == 'due' then
  release_due(seg, ek, now_ms(), ttl)
  return 1
end
local rk = KEYS[2]
if op == 'release' or op == 'sell' then
  return end_line(seg, ek, rk, op, tonumber(ARGV[3]) or 0, ttl) and 1 or 0
end
if op ~= 'pin' then
  return redis.error_reply('redis_line.lua: unknown op ' .. tostring(op))
end
local rec = redis.call('GET', rk)
local rem, st, hq = string.match(rec or '', '^(%d+) ?(%a?) ?(%d*)$')
if st == 'p' then
  return 'ok'
elseif st ~= 'h' then
  return 'gone'
end
local dl = tonumber(redis.call('ZSCORE', ek, rk))
if not dl or dl <= now_ms() then
  end_line(seg, ek, rk, 'release', 0, ttl)
  return 'expired'
end
redis.call('SET', rk, rem .. ' p ' .. hq)
redis.call('ZADD', ek, FAR, rk)
mark(seg, ek)
return 'ok'
