// Package sqlengine_test holds the tests of sqlengine.Tables that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package sqlengine_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }
