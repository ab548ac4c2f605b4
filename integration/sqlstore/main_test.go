// Package sqlstore_test holds the tests of sqlstore that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package sqlstore_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }
