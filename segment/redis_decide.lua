-- Recovery of transfers (package segment, Redis): the decision of each
-- transfer named, at its destination, aborting ('x') those it has not
-- decided, so that a late redis_arrive.lua can no longer apply them.
-- KEYS     the decisions, all of one destination segment
-- ARGV[1]  how long to keep a decision, in ms
-- Returns the decision of each, 'c' or 'x'.
local out = {}
for i = 1, #KEYS do
  out[i] = redis.call('SET', KEYS[i], 'x', 'NX', 'GET', 'PX', ARGV[1]) or 'x'
end
return out
