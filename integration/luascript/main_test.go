// Package luascript_test holds the tests of luascript that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package luascript_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }
