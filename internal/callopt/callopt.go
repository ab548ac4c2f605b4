// Package callopt holds the options of one call. The root package's
// Options set them (each is a [Setter]) and package driver reads them;
// keeping the struct here lets driver import the root package without a
// cycle.
package callopt

import "context"

// Options holds what the options of one call set.
type Options struct {
	// Key is the idempotency key; empty means none.
	Key string
	// Ref is the caller's reference (an order id, a reason) that a
	// movement ledger records with the call's entries; empty means none.
	Ref string

	keyed  bool // WithKey was given, even with an empty key
	reffed bool // WithRef was given, even with an empty ref
}

// SetKey sets the idempotency key and records that one was given.
func SetKey(o *Options, key string) { o.Key, o.keyed = key, true }

// Keyed reports whether a key was given, even an empty one.
func Keyed(o Options) bool { return o.keyed }

// Setter is what every inventory.Option is: Set applies it to o.
type Setter interface{ Set(o *Options) }

// SetRef sets the caller's reference and records that one was given.
func SetRef(o *Options, ref string) { o.Ref, o.reffed = ref, true }

// Reffed reports whether a reference was given, even an empty one.
func Reffed(o Options) bool { return o.reffed }

// refKey is the context key of a call's reference.
type refKey struct{}

// WithRefContext returns ctx carrying ref, the reference of the call that
// ctx is the context of, from the strategy's face to its backend (whose
// Move has no options argument). An empty ref returns ctx itself: a call
// without a reference costs no allocation.
func WithRefContext(ctx context.Context, ref string) context.Context {
	if ref == "" {
		return ctx
	}
	return context.WithValue(ctx, refKey{}, ref)
}

// RefOf returns the reference that [WithRefContext] put in ctx, or "".
func RefOf(ctx context.Context) string {
	ref, _ := ctx.Value(refKey{}).(string)
	return ref
}
