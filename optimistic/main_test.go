package optimistic_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// toxiproxy's reset_peer toxic closes its link without draining the
	// stage before it, whose goroutine then blocks on a send forever.
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"))
}
