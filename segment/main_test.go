package segment_test

import (
	"testing"

	"github.com/stockkit/inventory/internal/faulttest"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }
