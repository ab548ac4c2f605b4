package redislock_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// TestDefaultPrefixesWithLedger: a Manager over a redisstore that keeps
// the ledger, both with their default prefix on one Redis (as
// docs/ledger.md shows them), moves stock and records it. The lock key
// once was the ledger stream's key (PREFIX{tag}:l:SKU), and every call
// failed with WRONGTYPE.
func TestDefaultPrefixesWithLedger(t *testing.T) {
	ctx := context.Background()
	c := testenv.Redis(t)
	sku := testenv.Prefix() + "-shoe"
	t.Cleanup(func() { testenv.DeleteKeys(t, c, "*"+sku+"*") })
	s, err := redisstore.New(c, redisstore.WithLedger(0))
	require.NoError(t, err)
	m := newManager(t, c, s)
	require.NoError(t, m.Init(ctx, sku, 3))
	n, err := m.Reduce(ctx, sku, 1, inventory.WithKey("k"))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	st, err := ledger.Check(ctx, m, m, sku)
	require.NoError(t, err)
	require.EqualValues(t, 1, st.Sold)
	require.Equal(t, "none", c.Type(ctx, redislock.LockKey("inv", sku)).Val(), "the lock is released, and no other key is its")
}
