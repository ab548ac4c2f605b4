// Package callopt holds the options of one call. The root package's
// Options set them (each is a [Setter]) and package driver reads them;
// keeping the struct here lets driver import the root package without a
// cycle.
package callopt

// Options holds what the options of one call set.
type Options struct {
	// Key is the idempotency key; empty means none.
	Key string

	keyed bool // WithKey was given, even with an empty key
}

// SetKey sets the idempotency key and records that one was given.
func SetKey(o *Options, key string) { o.Key, o.keyed = key, true }

// Keyed reports whether a key was given, even an empty one.
func Keyed(o Options) bool { return o.keyed }

// Setter is what every inventory.Option is: Set applies it to o.
type Setter interface{ Set(o *Options) }
