package faulttest

import (
	"testing"

	"go.uber.org/goleak"
)

// VerifyTestMain is goleak.VerifyTestMain for packages that use a Proxy.
// toxiproxy v2.5.0 can leave one pipe goroutine blocked forever when a
// fault closes a link while bytes are still arriving; that one is ignored.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(opts, goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"))...)
}
