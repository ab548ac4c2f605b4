// Package outcome names the result of a stock call in one word, the same
// word for every decorator (metrics, spans, logs) and every report.
package outcome

import (
	"errors"

	"github.com/stockkit/inventory"
)

// The outcomes of a call. Every error maps to exactly one of them.
const (
	OK           = "ok"           // the call took effect (Cancel of an ended hold too)
	Insufficient = "insufficient" // ErrInsufficientStock: sold out, nothing taken
	Duplicate    = "duplicate"    // ErrDuplicate: an earlier call took effect
	Contention   = "contention"   // ErrContention: gave up (locks, retries, a rate limit)
	NotFound     = "not_found"    // ErrNotFound
	Invalid      = "invalid"      // ErrInvalidArgument
	Released     = "released"     // ErrHoldReleased: Confirm found its hold expired or cancelled
	Confirmed    = "confirmed"    // ErrHoldConfirmed: Cancel found its hold sold
	Error        = "error"        // anything else: the backend failed, a timeout, ctx done
)

// All lists every outcome, in the order above.
var All = []string{OK, Insufficient, Duplicate, Contention, NotFound, Invalid, Released, Confirmed, Error}

// Of returns the outcome of a call that returned err.
func Of(err error) string {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, inventory.ErrInsufficientStock):
		return Insufficient
	case errors.Is(err, inventory.ErrDuplicate):
		return Duplicate
	case errors.Is(err, inventory.ErrContention):
		return Contention
	case errors.Is(err, inventory.ErrNotFound):
		return NotFound
	case errors.Is(err, inventory.ErrInvalidArgument):
		return Invalid
	case errors.Is(err, inventory.ErrHoldReleased):
		return Released
	case errors.Is(err, inventory.ErrHoldConfirmed):
		return Confirmed
	}
	return Error
}

// Failed reports whether outcome is a failure of the system rather than a
// verdict on the call: Error and Contention. Sold out, a duplicate, an
// unknown SKU or a bad argument are answers, not failures.
func Failed(outcome string) bool { return outcome == Error || outcome == Contention }
