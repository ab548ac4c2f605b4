package outcome_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/outcome"
)

func TestOf(t *testing.T) {
	for err, want := range map[error]string{
		nil: outcome.OK,
		&inventory.InsufficientError{Short: []inventory.Shortfall{{Line: inventory.Line{SKU: "a", Qty: 2}, Available: 1}}}: outcome.Insufficient,
		fmt.Errorf("luascript: %w", inventory.ErrInsufficientStock):                                                        outcome.Insufficient,
		fmt.Errorf("x: %w", inventory.ErrDuplicate):                                                                        outcome.Duplicate,
		fmt.Errorf("ratelimit: %w", inventory.ErrContention):                                                               outcome.Contention,
		fmt.Errorf("x: %w", inventory.ErrNotFound):                                                                         outcome.NotFound,
		fmt.Errorf("x: %w", inventory.ErrInvalidArgument):                                                                  outcome.Invalid,
		fmt.Errorf("x: %w", inventory.ErrHoldReleased):                                                                     outcome.Released,
		fmt.Errorf("x: %w", inventory.ErrHoldConfirmed):                                                                    outcome.Confirmed,
		fmt.Errorf("redis: %w", context.DeadlineExceeded):                                                                  outcome.Error,
		errors.New("dial tcp: connection refused"):                                                                         outcome.Error,
	} {
		assert.Equal(t, want, outcome.Of(err), "%v", err)
	}
	assert.True(t, outcome.Failed(outcome.Error))
	assert.True(t, outcome.Failed(outcome.Contention))
	assert.False(t, outcome.Failed(outcome.Insufficient), "sold out is not a failure")
	assert.Len(t, outcome.All, 9)
}
