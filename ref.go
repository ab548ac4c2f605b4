package inventory

import "github.com/stockkit/inventory/internal/callopt"

// WithRef gives the call a caller's reference, an order id or a reason
// ("order 1042", "damaged in transit"), that a Manager keeping a movement
// ledger records in the call's entries (see package
// [github.com/stockkit/inventory/ledger]); a Manager without a ledger
// checks it and ignores it. It applies to Reduce, Return, ReduceLines and
// ReturnLines. A reference follows the SKU rules (1 to MaxSKULen bytes of
// UTF-8 without control characters); anything else makes the call fail
// with [ErrInvalidArgument] before any I/O. Unlike [WithKey] it changes
// nothing of what the call does: two calls with one reference both take
// effect.
func WithRef(ref string) Option {
	return optionFunc(func(o *callopt.Options) { callopt.SetRef(o, ref) })
}
