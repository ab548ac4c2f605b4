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

func hash(sku string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(sku))
	return h.Sum64()
}

func tag(sku string) string { return fmt.Sprintf("{%016x}", hash(sku)) }

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

// Window is the string in which the scripts keep the recent calls of one
// client (a [Caller], named by its id) on sku during one minute (epoch: Unix
// minutes), so that a command the client library sent again after losing
// its reply is answered, not applied twice: PREFIX{tag}:r:ID:EPOCH:SKU. It
// is a ring of fixed-size slots (see [WindowSize]). The id has a fixed
// length, so the key is unambiguous.
func Window(prefix, sku, id string, epoch int64) string {
	return prefix + tag(sku) + ":r:" + id + ":" + strconv.FormatInt(epoch, 10) + ":" + sku
}
