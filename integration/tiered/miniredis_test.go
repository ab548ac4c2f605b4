package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	_ "github.com/stockkit/inventory/integration/sqlite" // registers "sqlite"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/tiered"
)

// embedded returns a miniredis client and a SQLite database with tiered's
// tables: the embedded layout of examples/flashsale, nothing outside the
// test process but a file in t's temporary directory.
func embedded(t *testing.T) (*redis.Client, *sqlx.DB, *miniredis.Miniredis) {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 64})
	t.Cleanup(func() { rdb.Close() })
	db := testenv.SQLite(t)
	m, err := tiered.New(rdb, db)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, m.CreateTables(ctx))
	return rdb, db, mr
}

func manager(t *testing.T, rdb redis.UniversalClient, db *sqlx.DB, opts ...tiered.Option) *tiered.Manager {
	t.Helper()
	m, err := tiered.New(rdb, db, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// TestConformanceMiniredis runs the contract's suite on tiered over
// miniredis and SQLite (TestSyncMiniredis runs the grants, refills and
// syncer on small chunks). 200 buyers: miniredis runs one script at a time
// and parses it on every call, a few hundred calls a second under -race.
func TestConformanceMiniredis(t *testing.T) {
	rdb, db, _ := embedded(t)
	inventorytest.Run(t, inventorytest.Config{
		NewManager: func(t *testing.T) inventory.StockManager {
			return manager(t, rdb, db)
		},
		Buyers: 200,
	})
}

// TestSyncMiniredis sells on miniredis, leaves part of the journal pending
// with a consumer that dies (XREADGROUP, no XACK), and checks that Sync
// takes it over (XAUTOCLAIM), that Drain, Lag and Reconcile work, and that
// SQL ends with every unit sold exactly once.
func TestSyncMiniredis(t *testing.T) {
	rdb, db, mr := embedded(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := manager(t, rdb, db, tiered.WithChunk(7), tiered.WithLowWater(3), tiered.WithMaxAttempts(50), tiered.WithClaimIdle(time.Millisecond))
	const sku, initial, buyers = "hot", 120, 40
	require.NoError(t, m.Init(ctx, sku, initial))

	var sold atomic.Int64
	var wg sync.WaitGroup
	for range buyers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				_, err := m.Reduce(ctx, sku, 1)
				switch {
				case err == nil:
					sold.Add(1)
					continue
				case errors.Is(err, inventory.ErrContention):
					continue
				case !errors.Is(err, inventory.ErrInsufficientStock):
					t.Errorf("reduce: %v", err)
				}
				return
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, initial, sold.Load(), "every unit sold once")

	// A consumer of the syncers' group reads some entries and dies.
	var journal string
	for _, k := range mr.Keys() {
		if mr.Type(k) == "stream" {
			journal = k
		}
	}
	require.NotEmpty(t, journal, "the journal stream")
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: "tiered", Consumer: "dead", Streams: []string{journal, ">"}, Count: 2, Block: -1}).Result()
	require.NoError(t, err)
	require.NotEmpty(t, res[0].Messages)
	entries, err := rdb.XRange(ctx, journal, "-", "+").Result()
	require.NoError(t, err)
	var units int64
	for _, e := range entries { // a lone call's entry, or a merged batch's (d its net units)
		d, err := strconv.ParseInt(fmt.Sprint(e.Values["d"]), 10, 64)
		require.NoError(t, err, "entry %s: %v", e.ID, e.Values)
		units += d
	}
	assert.EqualValues(t, initial, units, "the journal holds every unit sold")
	lag, err := m.Lag(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, len(entries), lag, "none acknowledged")

	time.Sleep(5 * time.Millisecond) // the dead consumer's entries idle past the claim time
	n, err := m.Sync(ctx)
	require.NoError(t, err)
	assert.Equal(t, len(entries), n, "the dead consumer's entries taken over, the rest read")
	require.NoError(t, m.Drain(ctx))
	lag, err = m.Lag(ctx)
	require.NoError(t, err)
	assert.Zero(t, lag)
	pending, err := rdb.XPending(ctx, journal, "tiered").Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count, "nothing left pending")

	drift, err := m.Reconcile(ctx)
	require.NoError(t, err)
	require.Len(t, drift, 1)
	d := drift[0]
	t.Logf("miniredis + SQLite: sold %d; Reconcile: %+v", sold.Load(), d)
	assert.True(t, d.Clean(), "no drift: %+v", d)
	assert.EqualValues(t, initial, d.Sold, "SQL has every sale once")
	assert.Zero(t, d.Pool+d.Allotment)

	// miniredis loses its data (a restart without persistence): Reconcile
	// records the allotment as lost, never reuses it.
	require.NoError(t, m.Init(ctx, sku, 50))
	_, err = m.Reduce(ctx, sku, 4)
	require.NoError(t, err)
	require.NoError(t, m.Drain(ctx))
	mr.FlushAll()
	drift, err = m.Reconcile(ctx)
	require.NoError(t, err)
	d = drift[0]
	assert.True(t, d.RedisMissing, "%+v", d)
	assert.EqualValues(t, 3, d.Lost, "the unsold allotment of the first chunk: %+v", d)
	v, err := m.Get(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 50-7, v, "the pool only")
}
