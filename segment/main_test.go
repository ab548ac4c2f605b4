package segment_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/stockkit/inventory/internal/faulttest"
)

// TestMain checks for leaked goroutines, but for go-redis's dial retry
// after a refused connection (TestRedisKilledMidSale), which sleeps a
// second before it ends.
func TestMain(m *testing.M) {
	faulttest.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
