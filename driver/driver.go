// Package driver holds what people who write strategies need and people who
// use them do not, as database/sql/driver does for database/sql: the checks
// every call makes before any I/O, and the options of one call.
//
// A strategy calls the check of each method first (ValidateMove for Reduce
// and Return, ValidateInit, ValidateSKU for Get, ValidateLinesCall,
// ValidateReserve, ValidateHoldID) and returns its error as is; each wraps
// [inventory.ErrInvalidArgument] and names what is wrong.
package driver

import (
	"context"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/callopt"
)

// Direction says which way a call moves stock. Idempotency keys are kept
// per (SKU, key, direction), so a Reduce and a Return may share a key.
type Direction string

// The two directions.
const (
	DirReduce Direction = "reduce"
	DirReturn Direction = "return"
)

// CallOptions holds what [inventory.Option]s set on one call: its field
// Key is the idempotency key, empty for none, and Ref the caller's
// reference ([inventory.WithRef]), empty for none. Strategies obtain it
// with [Apply].
type CallOptions = callopt.Options

// Apply collects opts. A nil Option is ignored.
func Apply(opts []inventory.Option) CallOptions {
	var o CallOptions
	for _, opt := range opts {
		if s, ok := opt.(callopt.Setter); ok { // every non-nil Option is one
			s.Set(&o)
		}
	}
	return o
}

// ValidateSKU reports whether sku is a valid SKU: 1 to MaxSKULen bytes of
// valid UTF-8 containing no control characters. The error wraps
// [inventory.ErrInvalidArgument].
func ValidateSKU(sku string) error {
	return validateID("sku", sku)
}

func validateID(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty %s", inventory.ErrInvalidArgument, what)
	case len(s) > inventory.MaxSKULen:
		return fmt.Errorf("%w: %s is %d bytes, more than %d", inventory.ErrInvalidArgument, what, len(s), inventory.MaxSKULen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", inventory.ErrInvalidArgument, what, s)
	}
	for i, r := range s {
		if unicode.IsControl(r) {
			return fmt.Errorf("%w: %s %q has control character %U at byte %d", inventory.ErrInvalidArgument, what, s, r, i)
		}
	}
	return nil
}

// validateKey checks the idempotency key and the reference of o, those
// that were given.
func validateKey(o CallOptions) error {
	if callopt.Keyed(o) {
		if err := validateID("idempotency key", o.Key); err != nil {
			return err
		}
	}
	if callopt.Reffed(o) {
		return validateID("reference", o.Ref)
	}
	return nil
}

// ValidateInit checks the arguments of Init: a valid SKU and qty in
// 0..MaxStock. The error wraps [inventory.ErrInvalidArgument].
func ValidateInit(sku string, qty int64) error {
	if err := ValidateSKU(sku); err != nil {
		return err
	}
	if qty < 0 || qty > inventory.MaxStock {
		return fmt.Errorf("%w: init quantity %d outside 0..%d", inventory.ErrInvalidArgument, qty, inventory.MaxStock)
	}
	return nil
}

// ValidateMove checks the arguments of Reduce and Return: a valid SKU, qty
// in 1..MaxStock and, if given, a valid idempotency key and reference. It returns
// the collected options. The error wraps [inventory.ErrInvalidArgument].
func ValidateMove(sku string, qty int64, opts []inventory.Option) (CallOptions, error) {
	o := Apply(opts)
	if err := ValidateSKU(sku); err != nil {
		return o, err
	}
	if qty < 1 || qty > inventory.MaxStock {
		return o, fmt.Errorf("%w: quantity %d outside 1..%d", inventory.ErrInvalidArgument, qty, inventory.MaxStock)
	}
	return o, validateKey(o)
}

// CheckReturn reports, as an error wrapping [inventory.ErrInvalidArgument],
// whether returning qty units to a stock of cur would pass MaxStock.
// Strategies call it once they know the current stock, before writing.
func CheckReturn(cur, qty int64) error {
	if qty > inventory.MaxStock-cur {
		return fmt.Errorf("%w: returning %d to stock %d passes MaxStock %d", inventory.ErrInvalidArgument, qty, cur, inventory.MaxStock)
	}
	return nil
}

// ValidateLines checks the lines of a multi-SKU call: 1..MaxLines lines,
// each SKU valid and listed once, each qty in 1..MaxStock. The error wraps
// [inventory.ErrInvalidArgument].
func ValidateLines(lines []inventory.Line) error {
	if len(lines) == 0 || len(lines) > inventory.MaxLines {
		return fmt.Errorf("%w: %d lines, want 1..%d", inventory.ErrInvalidArgument, len(lines), inventory.MaxLines)
	}
	seen := make(map[string]struct{}, len(lines))
	for i, l := range lines {
		if err := ValidateSKU(l.SKU); err != nil {
			return fmt.Errorf("line %d: %w", i, err)
		}
		if l.Qty < 1 || l.Qty > inventory.MaxStock {
			return fmt.Errorf("%w: line %d (%q): quantity %d outside 1..%d", inventory.ErrInvalidArgument, i, l.SKU, l.Qty, inventory.MaxStock)
		}
		if _, dup := seen[l.SKU]; dup {
			return fmt.Errorf("%w: line %d: sku %q listed twice", inventory.ErrInvalidArgument, i, l.SKU)
		}
		seen[l.SKU] = struct{}{}
	}
	return nil
}

// ValidateLinesCall checks the lines and options of ReduceLines and
// ReturnLines, and returns the collected options. The error wraps
// [inventory.ErrInvalidArgument].
func ValidateLinesCall(lines []inventory.Line, opts []inventory.Option) (CallOptions, error) {
	o := Apply(opts)
	if err := ValidateLines(lines); err != nil {
		return o, err
	}
	return o, validateKey(o)
}

// ValidateHoldID checks a hold id: it follows the SKU rules. The error
// wraps [inventory.ErrInvalidArgument].
func ValidateHoldID(id string) error {
	return validateID("hold id", id)
}

// ValidateReserve checks the arguments of Reserve. The error wraps
// [inventory.ErrInvalidArgument].
func ValidateReserve(id string, lines []inventory.Line, ttl time.Duration) error {
	if err := ValidateHoldID(id); err != nil {
		return err
	}
	if ttl < inventory.MinHoldTTL || ttl > inventory.MaxHoldTTL {
		return fmt.Errorf("%w: hold ttl %v outside %v..%v", inventory.ErrInvalidArgument, ttl, inventory.MinHoldTTL, inventory.MaxHoldTTL)
	}
	return ValidateLines(lines)
}

// Ref returns the caller's reference ([inventory.WithRef]) of the call
// whose context ctx is, as the strategy's face passes it to a backend
// whose Move takes no options: "" for none. Strategies that keep a
// movement ledger record it.
func Ref(ctx context.Context) string { return callopt.RefOf(ctx) }

// WithRef returns ctx carrying ref for [Ref]; an empty ref returns ctx.
// A strategy's face calls it with the reference of a valid call.
func WithRef(ctx context.Context, ref string) context.Context {
	return callopt.WithRefContext(ctx, ref)
}
