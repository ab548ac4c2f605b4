package testenv

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// A Server serves the Examples only at the address they spell out, and
// only when it answers there.
func TestServerCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := ln.Addr().String()
	require.NoError(t, ln.Close())

	s := Server{"Redis", "INVENTORY_TEST_EXAMPLES_ADDR", closed, pingRedis}
	require.ErrorContains(t, s.check(), "Redis at "+closed+" is not reachable")

	t.Setenv(s.env, "127.0.0.1:1")
	require.ErrorContains(t, s.check(), "the Examples use "+closed+", $INVENTORY_TEST_EXAMPLES_ADDR names 127.0.0.1:1")

	t.Setenv(s.env, closed)
	s.ping = func(context.Context, string) error { return nil }
	require.NoError(t, s.check(), "the variable names the Examples' address, which answers")
}
