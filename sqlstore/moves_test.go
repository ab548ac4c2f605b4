package sqlstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/sqlstore"
)

// The movement ledger (WithLedger), not the idempotency keys' table
// (Schema.Ledger).

// TestMoves: every write of a Store WithLedger records its entry in its
// transaction; without a Manager's Note, what the write says.
func TestMoves(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		s := newStore(t, db, sqlstore.WithLedger())
		require.True(t, s.KeepsLedger())
		require.NoError(t, s.CreateTables(ctx))
		moveAll(t, ctx, s, "shoe")
		es, err := s.Entries(ctx, "shoe", 0, ledger.MaxPage)
		require.NoError(t, err)
		var got []string
		for _, e := range es {
			got = append(got, fmt.Sprint(e.Kind, " ", e.Units, " ", e.Key, " ", e.Hold))
		}
		require.Equal(t, []string{"init 10  ", "reduce 1 k ", "reserve 1  h:1", "cancel 1  h:1", "reserve 1  h:2", "confirm 1  h:2", "return 1  "}, got)
		st, err := ledger.Replay(ledger.History(ctx, s, "shoe", 0))
		require.NoError(t, err)
		require.Equal(t, ledger.Stock{Available: 9, Sold: 1}, st)

		// A Note in ctx is what the entry records.
		_, v, err := s.Read(ctx, "shoe")
		require.NoError(t, err)
		ok, err := s.CompareAndSet(lockmgr.WithNote(ctx, lockmgr.Note{Kind: ledger.Reduce, Units: 1, Ref: "noted"}), "shoe", v, 8, driver.DirReduce, "")
		require.NoError(t, err)
		require.True(t, ok)
		es, err = s.Entries(ctx, "shoe", es[len(es)-1].Pos, 10)
		require.NoError(t, err)
		require.Len(t, es, 1)
		require.Equal(t, "noted", es[0].Ref)
	})
}

// moveAll makes every kind of write on sku, straight on the Store: Init
// 10, a keyed compare-and-set to 9, a hold of 1 cancelled, a hold of 1
// sold, a return of 1: 9 left, 1 sold.
func moveAll(t *testing.T, ctx context.Context, s *sqlstore.Store, sku string) {
	t.Helper()
	require.NoError(t, s.Init(ctx, sku, 10))
	cas := func(to int64, dir driver.Direction, key string) bool {
		_, v, err := s.Read(ctx, sku)
		require.NoError(t, err)
		ok, err := s.CompareAndSet(ctx, sku, v, to, dir, key)
		require.NoError(t, err)
		return ok
	}
	require.True(t, cas(9, driver.DirReduce, "k"))
	ok, err := s.CompareAndSet(ctx, sku, -1, 8, driver.DirReduce, "")
	require.NoError(t, err)
	require.False(t, ok, "a lost compare records nothing")
	later := time.Now().Add(time.Hour)
	for _, h := range []struct {
		id   string
		sold bool
	}{{"h:1", false}, {"h:2", true}} {
		_, v, err := s.Read(ctx, sku)
		require.NoError(t, err)
		ok, err := s.Hold(ctx, sku, v, 8, h.id, 1, later)
		require.NoError(t, err)
		require.True(t, ok)
		_, err = s.Unhold(ctx, sku, h.id, h.sold)
		require.NoError(t, err)
	}
	n, err := s.Unhold(ctx, sku, "h:2", true)
	require.NoError(t, err)
	require.Zero(t, n, "no line, no entry")
	require.True(t, cas(9, driver.DirReturn, ""))
}

// TestMovesOff: a Store without WithLedger creates no ledger table and
// writes none (the schema's tables have none: a statement writing one
// would fail), and its Entries fail with ledger.ErrNotKept.
func TestMovesOff(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		s := newStore(t, db)
		require.False(t, s.KeepsLedger())
		require.NoError(t, s.CreateTables(ctx))
		moveAll(t, ctx, s, "shoe")
		_, err := s.Entries(ctx, "shoe", 0, 1)
		require.ErrorIs(t, err, ledger.ErrNotKept)
	})
}

// TestMovesStatements counts the statements each write sends (MariaDB's
// session counter Questions, on a pool of one connection): without a
// ledger, as many as before the ledger existed; with one, its INSERT more
// (and an unkeyed compare-and-set becomes a transaction, an Unhold of a
// sold line writes the stock row, and an Unhold reads the stock back).
func TestMovesStatements(t *testing.T) {
	db := sqltest.Open(t, "mariadb")
	db.SetMaxOpenConns(1)
	ctx := ctx(t)
	questions := func() int64 {
		var name string
		var n int64
		require.NoError(t, db.QueryRowxContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n))
		return n
	}
	count := func(call func() error) int64 {
		before := questions()
		require.NoError(t, call())
		return questions() - before - 1 // the SHOW of before
	}
	type sends struct{ cas, keyed, hold, unhold, sold int64 }
	got := map[bool]sends{}
	for _, on := range []bool{false, true} {
		var opts []sqlstore.Option
		if on {
			opts = append(opts, sqlstore.WithLedger())
		}
		s := newStore(t, db, opts...)
		require.NoError(t, s.CreateTables(ctx))
		sku := fmt.Sprint(testenv.Prefix(), on)
		require.NoError(t, s.Init(ctx, sku, 100))
		v := int64(0)
		cas := func(key string) func() error {
			return func() error {
				_, err := s.CompareAndSet(ctx, sku, v, 50, driver.DirReduce, key)
				v++
				return err
			}
		}
		_, v, _ = s.Read(ctx, sku)
		require.NoError(t, cas("")()) // prepares the statements
		require.NoError(t, cas("warm")())
		var n sends
		n.cas, n.keyed = count(cas("")), count(cas("k"))
		later := time.Now().Add(time.Hour)
		n.hold = count(func() error { _, err := s.Hold(ctx, sku, v, 49, "h:1", 1, later); v++; return err })
		n.unhold = count(func() error { _, err := s.Unhold(ctx, sku, "h:1", false); return err })
		_, v, _ = s.Read(ctx, sku)
		_, err := s.Hold(ctx, sku, v, 49, "h:2", 1, later)
		require.NoError(t, err)
		n.sold = count(func() error { _, err := s.Unhold(ctx, sku, "h:2", true); return err })
		got[on] = n
	}
	t.Logf("statements sent (cas, keyed cas, hold, unhold, sold unhold): ledger off %+v, on %+v", got[false], got[true])
	off, on := got[false], got[true]
	require.Equal(t, sends{cas: 1, keyed: 5, hold: 5, unhold: 6, sold: 5}, off, "without a ledger, as before")
	require.Equal(t, sends{cas: off.keyed, keyed: off.keyed + 1, hold: off.hold + 1, unhold: off.unhold + 2, sold: off.sold + 3}, on)
}

// TestWithLedgerOption: the option needs no I/O and Entries checks its
// arguments before any.
func TestWithLedgerOption(t *testing.T) {
	s, err := sqlstore.New(sqlx.NewDb(nil, "sqlite"), sqlstore.WithLedger())
	require.NoError(t, err)
	for _, bad := range []struct {
		sku   string
		after int64
		limit int
	}{{"", 0, 1}, {"a", -1, 1}, {"a", 0, 0}, {"a", 0, ledger.MaxPage + 1}} {
		_, err := s.Entries(context.Background(), bad.sku, bad.after, bad.limit)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	}
}
