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

// verdicts are the outcomes of the sentinels, in the order Of tries them.
var verdicts = []struct {
	err     error
	outcome string
}{
	{inventory.ErrInsufficientStock, Insufficient},
	{inventory.ErrDuplicate, Duplicate},
	{inventory.ErrContention, Contention},
	{inventory.ErrNotFound, NotFound},
	{inventory.ErrInvalidArgument, Invalid},
	{inventory.ErrHoldReleased, Released},
	{inventory.ErrHoldConfirmed, Confirmed},
}

// Of returns the outcome of a call that returned err.
func Of(err error) string {
	if err == nil {
		return OK
	}
	for _, v := range verdicts {
		if errors.Is(err, v.err) {
			return v.outcome
		}
	}
	return Error
}

// Failed reports whether outcome is a failure of the system rather than a
// verdict on the call: Error and Contention. Sold out, a duplicate, an
// unknown SKU or a bad argument are answers, not failures.
func Failed(outcome string) bool { return outcome == Error || outcome == Contention }
