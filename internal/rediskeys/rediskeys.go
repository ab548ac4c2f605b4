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
	"strconv"
	"strings"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// DefaultPrefix begins every key unless configured otherwise.
const DefaultPrefix = "inv"

// ValidatePrefix refuses a prefix that would break the layout: empty, over
// 64 bytes, not printable UTF-8, or holding a brace (which would move the
// hash tag).
func ValidatePrefix(p string) error {
	if err := driver.ValidateSKU(p); err != nil || len(p) > 64 || strings.ContainsAny(p, "{}") {
		return fmt.Errorf("%w: key prefix %q must be 1..64 bytes of UTF-8 without braces or control characters", inventory.ErrInvalidArgument, p)
	}
	return nil
}

// ValidateOptions checks, for pkg's New, the options luascript and
// redisstore share: the key prefix, a key TTL of at least 1ms and, when
// WithReplicas was given (replicasSet), n >= 1 replicas and a timeout of at
// least 1ms. Errors wrap [inventory.ErrInvalidArgument].
func ValidateOptions(pkg, prefix string, keyTTL time.Duration, replicasSet bool, replicas int, replicaTimeout time.Duration) error {
	if err := ValidatePrefix(prefix); err != nil {
		return fmt.Errorf("%s: %w", pkg, err)
	}
	if keyTTL < time.Millisecond {
		return fmt.Errorf("%w: %s: key TTL %v is under 1ms", inventory.ErrInvalidArgument, pkg, keyTTL)
	}
	if replicasSet && (replicas < 1 || replicaTimeout < time.Millisecond) {
		return fmt.Errorf("%w: %s: WithReplicas(%d, %v): want n >= 1 and a timeout of at least 1ms",
			inventory.ErrInvalidArgument, pkg, replicas, replicaTimeout)
	}
	return nil
}

// hash is 64-bit FNV-1a of sku, written out so that it allocates nothing.
func hash(sku string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(sku); i++ {
		h ^= uint64(sku[i])
		h *= 1099511628211
	}
	return h
}

const tagLen = 18 // "{" + 16 hex digits + "}"

// tagOf returns sku's hash tag, {%016x} of its hash.
func tagOf(sku string) [tagLen]byte {
	const digits = "0123456789abcdef"
	var t [tagLen]byte
	t[0], t[tagLen-1] = '{', '}'
	h := hash(sku)
	for i := 16; i >= 1; i-- {
		t[i] = digits[h&0xf]
		h >>= 4
	}
	return t
}

// writeTag writes sku's hash tag, {%016x} of its hash, to b.
func writeTag(b *strings.Builder, sku string) {
	t := tagOf(sku)
	b.Write(t[:])
}

// tag returns sku's hash tag, {%016x} of its hash.
func tag(sku string) string {
	var b strings.Builder
	b.Grow(tagLen)
	writeTag(&b, sku)
	return b.String()
}

// Stock is the key holding the stock of sku, as a decimal integer string:
// PREFIX{tag}:s:SKU.
func Stock(prefix, sku string) string {
	var b strings.Builder
	b.Grow(len(prefix) + tagLen + 3 + len(sku))
	b.WriteString(prefix)
	writeTag(&b, sku)
	b.WriteString(":s:")
	b.WriteString(sku)
	return b.String()
}

// Key is the key recording that an idempotent call took effect; its value
// is the remaining stock the call returned (older writers appended ":" and
// a token; readers take the digits before any ":"):
// PREFIX{tag}:k:DIR:LEN:SKU:KEY. The length makes it unambiguous.
func Key(prefix, sku string, dir driver.Direction, key string) string {
	var b strings.Builder
	b.Grow(keyLen(prefix, sku, dir, key))
	writeKey(&b, prefix, tagOf(sku), sku, dir, key)
	return b.String()
}

// keyLen is the length of [Key]'s result.
func keyLen(prefix, sku string, dir driver.Direction, key string) int {
	return len(prefix) + tagLen + 3 + len(dir) + 1 + decimalLen(len(sku)) + 1 + len(sku) + 1 + len(key)
}

// decimalLen is the number of decimal digits of n >= 0.
func decimalLen(n int) int {
	d := 1
	for ; n >= 10; n /= 10 {
		d++
	}
	return d
}

// writeKey writes [Key] to b, with t the hash tag of sku.
func writeKey(b *strings.Builder, prefix string, t [tagLen]byte, sku string, dir driver.Direction, key string) {
	var n [20]byte
	b.WriteString(prefix)
	b.Write(t[:])
	b.WriteString(":k:")
	b.WriteString(string(dir))
	b.WriteByte(':')
	b.Write(strconv.AppendInt(n[:0], int64(len(sku)), 10))
	b.WriteByte(':')
	b.WriteString(sku)
	b.WriteByte(':')
	b.WriteString(key)
}

// MoveKeys returns the keys one Reduce or Return of sku names, built in one
// allocation: the stock key (as [Stock]), the hold marker (as
// [HoldMarker]) and, when key is not "", the record of key (as [Key]; ""
// otherwise).
func MoveKeys(prefix, sku string, dir driver.Direction, key string) (stock, marker, rec string) {
	head := len(prefix) + tagLen + 3 + len(sku) // PREFIX{tag}:s:SKU
	size := 2 * head
	if key != "" {
		size += keyLen(prefix, sku, dir, key)
	}
	t := tagOf(sku) // hashed once for the two or three keys
	var b strings.Builder
	b.Grow(size)
	for _, kind := range [2]string{":s:", ":m:"} {
		b.WriteString(prefix)
		b.Write(t[:])
		b.WriteString(kind)
		b.WriteString(sku)
	}
	if key != "" {
		writeKey(&b, prefix, t, sku, dir, key)
	}
	all := b.String()
	return all[:head], all[head : 2*head], all[2*head:]
}
