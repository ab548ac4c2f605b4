// Package rediskeys is the Redis key layout shared by every strategy that
// keeps stock in Redis, so that a service can swap luascript for a lock
// strategy over the same data.
//
// Every key of one SKU carries the same hash tag, derived from the SKU's
// bytes, so multi-key scripts stay in one Redis Cluster slot whatever the
// SKU contains (braces included). The SKU itself follows the tag verbatim,
// so keys are readable and distinct SKUs never share a key.
package rediskeys

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/stockkit/inventory"
)

// DefaultPrefix begins every key unless configured otherwise.
const DefaultPrefix = "inv"

// ValidatePrefix refuses a prefix that would break the layout: empty, over
// 64 bytes, not printable UTF-8, or holding a brace (which would move the
// hash tag).
func ValidatePrefix(p string) error {
	if err := inventory.ValidateSKU(p); err != nil || len(p) > 64 || strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: key prefix %q must be 1..64 bytes of UTF-8 without braces or control characters", inventory.ErrInvalidArgument, p)
	}
	return nil
}

func tag(sku string) string {
	h := fnv.New64a()
	h.Write([]byte(sku))
	return fmt.Sprintf("{%016x}", h.Sum64())
}

// Stock is the key holding the stock of sku, as a decimal integer string:
// PREFIX{tag}:s:SKU.
func Stock(prefix, sku string) string {
	return prefix + tag(sku) + ":s:" + sku
}

// Key is the key recording that an idempotent call took effect; its value
// is the remaining stock the call returned:
// PREFIX{tag}:k:DIR:LEN:SKU:KEY. The length makes it unambiguous.
func Key(prefix, sku string, dir inventory.Direction, key string) string {
	return prefix + tag(sku) + ":k:" + string(dir) + ":" + strconv.Itoa(len(sku)) + ":" + sku + ":" + key
}

// Call is the key marking that the call with this random token took effect
// on sku; its value is the remaining stock the call returned:
// PREFIX{tag}:t:TOKEN. A client library that re-sends a command whose reply
// was lost finds it and does not apply the call twice.
func Call(prefix, sku, token string) string {
	return prefix + tag(sku) + ":t:" + token
}
