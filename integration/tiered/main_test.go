// Package tiered_test holds the tests of tiered that need the integration
// module's dependencies: miniredis (the embedded Redis of examples/flashsale)
// in front of SQLite.
package tiered_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }
