package inventorytest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

func TestMemoryKeyExpires(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(time.Minute)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	require.NoError(t, m.Init(ctx, "a", 10))
	_, err := m.Reduce(ctx, "a", 1, inventory.WithKey("k"))
	require.NoError(t, err)
	now = now.Add(59 * time.Second)
	_, err = m.Reduce(ctx, "a", 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "inside the TTL")
	now = now.Add(time.Second)
	rem, err := m.Reduce(ctx, "a", 1, inventory.WithKey("k"))
	require.NoError(t, err, "the key expired after its TTL")
	require.EqualValues(t, 8, rem)
}

func TestMemoryPrunesExpiredKeys(t *testing.T) {
	ctx := context.Background()
	m := NewMemory(time.Minute)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	require.NoError(t, m.Init(ctx, "a", inventory.MaxStock))
	for i := range 5000 {
		_, err := m.Reduce(ctx, "a", 1, inventory.WithKey(string(rune('a'+i%26))+time.Duration(i).String()))
		require.NoError(t, err)
		now = now.Add(100 * time.Millisecond)
	}
	require.Less(t, len(m.keys), 2*600+2048, "expired keys are pruned; live keys of one TTL are 600")
}
