// Package redislock_test holds the tests of redislock that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package redislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
