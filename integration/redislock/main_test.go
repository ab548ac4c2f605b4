// Package redislock_test holds the tests of redislock that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package redislock_test

import (
	"testing"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

var ctxFor = itest.CtxFor
