// Package redisstore_test holds the tests of redisstore that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package redisstore_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/redisstore"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

func requireStock(t *testing.T, s *redisstore.Store, sku string, want int64) {
	t.Helper()
	n, err := s.Get(context.Background(), sku)
	require.NoError(t, err)
	require.Equal(t, want, n)
}
