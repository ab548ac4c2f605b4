package rowlock_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.SkipExamplesWithout("^Example$", testenv.MySQLServer)
	faulttest.VerifyTestMain(m)
}

// TestExamples reports the Examples that TestMain left out for want of
// their servers (skipped, or failed when CI=true).
func TestExamples(t *testing.T) { testenv.ExamplesRan(t) }
