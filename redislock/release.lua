-- Frees the lock KEYS[1] if token ARGV[1] holds it: hands it over to the
-- first waiter of the queue KEYS[2] whose channel is listened to on this
-- node (see acquire.lua), or deletes it when there is none.
-- Handing over sets the lock to the waiter's token for the waiter's TTL
-- and publishes "TOKEN KEYS[1]\nKEYS[2]" on the waiter's channel. A waiter
-- whose channel nobody hears here (its process is gone, or it listens on
-- another node of a Cluster) is skipped, and no message is sent: on a
-- Cluster a PUBLISH reaches the subscribers of every node, so a message
-- sent to a waiter not counted would make a second holder.
-- Returns 1 when freed, 0 when the lock is gone or someone else's.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
for _ = 1, 100 do
  local head = redis.call('ZPOPMIN', KEYS[2])
  if #head == 0 then
    break
  end
  local token, ttl, channel = string.match(head[1], '^(%S+) (%d+) (.+)$')
  if token and redis.call('PUBSUB', 'NUMSUB', channel)[2] > 0 then
    redis.call('SET', KEYS[1], token, 'PX', ttl)
    redis.call('PUBLISH', channel, token .. ' ' .. KEYS[1] .. '\n' .. KEYS[2])
    return 1
  end
end
redis.call('DEL', KEYS[1])
return 1
