package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
)

// TestWaitsForWriteLock runs each writing method of the Store while
// another connection holds SQLite's write lock, and releases the lock a
// little later: each must wait for it (the DSN's busy timeout) and
// succeed, on both DSNs. A transaction that reads before it writes cannot
// wait when it began DEFERRED: SQLite refuses its first write at once with
// SQLITE_BUSY (issue 27: a Reserve reported ErrContention with its lines
// held).
func TestWaitsForWriteLock(t *testing.T) {
	for _, engine := range []string{"sqlite", "sqlite-deferred"} {
		t.Run(engine, func(t *testing.T) {
			ctx := ctx(t)
			db := sqltest.Open(t, engine)
			s := newStore(t, db)
			sku, id := testenv.Prefix(), "h:"+testenv.Prefix()
			require.NoError(t, s.Init(ctx, sku, 10))
			_, err := s.CreateOrder(ctx, id, []inventory.Line{{SKU: sku, Qty: 2}}, time.Hour, time.Minute)
			require.NoError(t, err)
			version := func() int64 {
				_, v, err := s.Read(ctx, sku)
				require.NoError(t, err)
				return v
			}
			for _, op := range []struct {
				name string
				call func() error
			}{
				{"CreateOrder", func() error {
					_, err := s.CreateOrder(ctx, "h:"+testenv.Prefix(), []inventory.Line{{SKU: sku, Qty: 1}}, time.Hour, time.Minute)
					return err
				}},
				{"Hold", func() error {
					ok, err := s.Hold(ctx, sku, version(), 8, id, 2, time.Now().Add(time.Hour))
					require.True(t, ok || err != nil)
					return err
				}},
				{"UpdateOrder", func() error { _, _, err := s.UpdateOrder(ctx, id, lockmgr.StepComplete); return err }},
				{"Unhold", func() error { _, err := s.Unhold(ctx, sku, id, false); return err }},
				{"CompareAndSet", func() error {
					ok, err := s.CompareAndSet(ctx, sku, version(), 9, driver.DirReduce, testenv.Prefix())
					require.True(t, ok || err != nil)
					return err
				}},
			} {
				assert.NoError(t, whileWriteLocked(t, db, op.call), op.name)
			}
		})
	}
}

// whileWriteLocked runs call while another connection of db holds the
// write lock, which it releases 50ms after call began, and returns call's
// error.
func whileWriteLocked(t *testing.T, db *sqlx.DB, call func() error) error {
	ctx := context.Background()
	conn, err := db.Connx(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- call() }()
	time.Sleep(50 * time.Millisecond)
	_, err = conn.ExecContext(ctx, "COMMIT")
	require.NoError(t, err)
	return <-done
}
