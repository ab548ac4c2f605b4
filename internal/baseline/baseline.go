// Package baseline holds the bare forms the strategies are measured against
// (make bench's comparisons, flashsale's bare-script row). They are not
// strategies: safe against overselling, but with no idempotency keys, no
// resend protection and no errors told apart.
package baseline

import "github.com/redis/go-redis/v9"

// RedisLua is the bare check-and-DECRBY script, luascript's baseline:
// KEYS[1] is the stock key, ARGV[1] the units to take. It returns the
// remaining stock, or -1 when fewer units remain (or the key is missing).
// It never oversells: Redis runs it alone.
const RedisLua = `local v = tonumber(redis.call('GET', KEYS[1]))
if v and v >= tonumber(ARGV[1]) then return redis.call('DECRBY', KEYS[1], ARGV[1]) end
return -1`

// RedisScript is RedisLua as a script run with EVALSHA (EVAL when Redis
// does not have it yet).
var RedisScript = redis.NewScript(RedisLua)
