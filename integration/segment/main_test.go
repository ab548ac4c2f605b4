// Package segment_test holds the tests of package segment that cannot run
// under the race detector: a sale of 10,000 buyers (sale_test.go, built
// without -race; make test runs it in its NORACE pass).
package segment_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }
