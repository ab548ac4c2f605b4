package inventorytest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
)

// clocked returns a Memory of key TTL ttl on a clock of its own, with SKU
// "a" of stock units, and the function that moves its clock on by d.
func clocked(t *testing.T, ttl time.Duration, stock int64) (m *Memory, advance func(d time.Duration)) {
	t.Helper()
	m = NewMemory(ttl)
	now := time.Unix(1000, 0)
	m.now = func() time.Time { return now }
	require.NoError(t, m.Init(context.Background(), "a", stock))
	return m, func(d time.Duration) { now = now.Add(d) }
}

func TestMemoryKeyExpires(t *testing.T) {
	ctx := context.Background()
	m, advance := clocked(t, time.Minute, 10)
	_, err := m.Reduce(ctx, "a", 1, inventory.WithKey("k"))
	require.NoError(t, err)
	advance(59 * time.Second)
	_, err = m.Reduce(ctx, "a", 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrDuplicate, "inside the TTL")
	advance(time.Second)
	rem, err := m.Reduce(ctx, "a", 1, inventory.WithKey("k"))
	require.NoError(t, err, "the key expired after its TTL")
	require.EqualValues(t, 8, rem)
}

func TestMemoryPrunesExpiredKeys(t *testing.T) {
	ctx := context.Background()
	m, advance := clocked(t, time.Minute, inventory.MaxStock)
	for i := range 5000 {
		_, err := m.Reduce(ctx, "a", 1, inventory.WithKey(string(rune('a'+i%26))+time.Duration(i).String()))
		require.NoError(t, err)
		advance(100 * time.Millisecond)
	}
	require.Less(t, len(m.keys), 2*600+2048, "expired keys are pruned; live keys of one TTL are 600")
}

func TestMemoryHoldExpiresAtItsTTL(t *testing.T) {
	ctx := context.Background()
	m, advance := clocked(t, time.Hour, 10)
	require.NoError(t, m.Reserve(ctx, "h", []inventory.Line{{SKU: "a", Qty: 4}}, time.Minute))
	advance(time.Minute - time.Nanosecond)
	n, err := m.Sweep(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "live one nanosecond before its TTL")
	rem, err := m.Reduce(ctx, "a", 1)
	require.NoError(t, err)
	require.EqualValues(t, 5, rem, "traffic leaves a live hold alone")
	advance(time.Nanosecond)
	held, err := m.Held(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 4, held, "past its TTL, a hold counts until released; Held releases nothing")
	require.ErrorIs(t, m.Confirm(ctx, "h"), inventory.ErrHoldReleased, "expired at exactly its TTL")
	rem, err = m.Get(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 9, rem)
}

func TestMemoryForgetsEndedHolds(t *testing.T) {
	ctx := context.Background()
	m, advance := clocked(t, time.Hour, 10) // key TTL
	ls := []inventory.Line{{SKU: "a", Qty: 1}}
	require.NoError(t, m.Reserve(ctx, "h", ls, 2*time.Hour))
	advance(90 * time.Minute)
	require.ErrorIs(t, m.Reserve(ctx, "h", ls, time.Minute), inventory.ErrDuplicate, "a live hold is kept past the key TTL")
	require.NoError(t, m.Confirm(ctx, "h"))
	advance(time.Hour - time.Nanosecond)
	require.ErrorIs(t, m.Reserve(ctx, "h", ls, time.Minute), inventory.ErrDuplicate, "an ended hold's id is kept for the key TTL")
	require.ErrorIs(t, m.Cancel(ctx, "h"), inventory.ErrHoldConfirmed)
	advance(time.Nanosecond)
	require.ErrorIs(t, m.Confirm(ctx, "h"), inventory.ErrNotFound, "forgotten a key TTL after it ended")
	require.ErrorIs(t, m.Cancel(ctx, "h"), inventory.ErrNotFound)
	require.NoError(t, m.Reserve(ctx, "h", ls, time.Minute), "the id is free again")
	held, err := m.Held(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 1, held)
}

func TestMemoryLinesKeyExpires(t *testing.T) {
	ctx := context.Background()
	m, advance := clocked(t, time.Minute, 10)
	ls := []inventory.Line{{SKU: "a", Qty: 1}}
	require.NoError(t, m.ReduceLines(ctx, ls, inventory.WithKey("k")))
	advance(time.Minute - time.Nanosecond)
	require.ErrorIs(t, m.ReduceLines(ctx, ls, inventory.WithKey("k")), inventory.ErrDuplicate)
	advance(time.Nanosecond)
	require.NoError(t, m.ReduceLines(ctx, ls, inventory.WithKey("k")), "the key expired after its TTL")
	rem, err := m.Get(ctx, "a")
	require.NoError(t, err)
	require.EqualValues(t, 8, rem)
}

func TestMemoryPrunesEndedHolds(t *testing.T) {
	ctx := context.Background()
	m, advance := clocked(t, time.Minute, inventory.MaxStock)
	for i := range 5000 {
		id := "h" + time.Duration(i).String()
		require.NoError(t, m.Reserve(ctx, id, []inventory.Line{{SKU: "a", Qty: 1}}, time.Hour))
		require.NoError(t, m.Cancel(ctx, id))
		require.NoError(t, m.ReduceLines(ctx, []inventory.Line{{SKU: "a", Qty: 1}}, inventory.WithKey(id)))
		advance(100 * time.Millisecond)
	}
	require.Less(t, len(m.holds), 2*600+2048, "ended holds are pruned; those of one key TTL are 600")
	require.Less(t, len(m.lineKeys), 2*600+2048, "expired keys of lines calls are pruned")
}
