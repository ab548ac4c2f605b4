package sqlengine_test

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestStatements runs every statement of each engine against the real
// engine, one subtest per statement in the order they build on each other,
// and fails if a statement of [sqlengine.Tables.Statements] has none.
func TestStatements(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := testenv.Prefix()
		schema := sqldialect.Schema{Table: "stock_" + p, Ledger: "ledger_" + p}
		sqltest.Drop(t, db, schema.Table, schema.Ledger)
		open := func(ttl time.Duration) *sqlengine.Tables {
			return sqltest.Tables(t, db, sqlengine.Config{Schema: schema, KeyTTL: ttl, LockWait: 2 * time.Second})
		}
		tb, short := open(time.Hour), open(time.Millisecond)
		sku, unknown := testenv.Prefix(), testenv.Prefix()
		const reduce = driver.DirReduce

		steps := []struct {
			stmt string
			run  func(t *testing.T)
		}{
			{"create", func(t *testing.T) {
				require.NoError(t, tb.CreateTables(ctx))
				require.NoError(t, tb.CreateTables(ctx), "IF NOT EXISTS")
			}},
			{"init", func(t *testing.T) {
				require.NoError(t, tb.Init(ctx, sku, 5))
				require.NoError(t, tb.Init(ctx, sku, 7), "the upsert")
			}},
			{"read", func(t *testing.T) {
				stock, version, err := tb.Read(ctx, db, sku)
				require.NoError(t, err)
				require.Equal(t, [2]int64{7, 2}, [2]int64{stock, version}, "stock, version after two inits")
				_, _, err = tb.Read(ctx, db, unknown)
				require.ErrorIs(t, err, inventory.ErrNotFound)
			}},
			{"get", func(t *testing.T) {
				n, err := tb.Get(ctx, sku)
				require.NoError(t, err)
				require.EqualValues(t, 7, n)
				_, err = tb.Get(ctx, unknown)
				require.ErrorIs(t, err, inventory.ErrNotFound)
			}},
			{"lockTimeout", func(t *testing.T) {
				require.Equal(t, sqldialect.Postgres, tb.Engine, "only PostgreSQL sets one")
				require.NoError(t, tb.Tx(ctx, func(tx *sqlx.Tx) error {
					if _, err := tb.LockHolds(ctx, tx, sku); err != nil {
						return err
					}
					var v string
					require.NoError(t, tx.GetContext(ctx, &v, "SHOW lock_timeout"))
					require.Equal(t, "2s", v)
					return nil
				}))
			}},
			{"set", func(t *testing.T) {
				ok, err := tb.Set(ctx, db, sku, 2, 6)
				require.NoError(t, err)
				require.True(t, ok)
				ok, err = tb.Set(ctx, db, sku, 2, 1)
				require.NoError(t, err)
				require.False(t, ok, "stale version")
			}},
			{"move", func(t *testing.T) {
				n, ok, err := tb.Move(ctx, db, sku, -2, 2, math.MaxInt64)
				require.NoError(t, err)
				require.True(t, ok)
				require.EqualValues(t, 4, n)
				_, ok, err = tb.Move(ctx, db, sku, -10, 10, math.MaxInt64)
				require.NoError(t, err)
				require.False(t, ok, "out of range")
				_, ok, err = tb.Move(ctx, db, unknown, 1, 0, math.MaxInt64)
				require.NoError(t, err)
				require.False(t, ok, "unknown sku")
			}},
			{"record", func(t *testing.T) {
				require.NoError(t, tb.Record(ctx, db, sku, reduce, "k1", 4))
				require.ErrorIs(t, tb.Record(ctx, db, sku, reduce, "k1", 3), inventory.ErrDuplicate)
			}},
			{"seen", func(t *testing.T) {
				rem, found, err := tb.Seen(ctx, db, sku, reduce, "k1")
				require.NoError(t, err)
				require.True(t, found)
				require.EqualValues(t, 4, rem)
				_, found, err = tb.Seen(ctx, db, sku, driver.DirReturn, "k1")
				require.NoError(t, err)
				require.False(t, found, "the other direction")
			}},
			{"renew", func(t *testing.T) {
				require.NoError(t, short.Record(ctx, db, sku, reduce, "k2", 1))
				time.Sleep(5 * time.Millisecond)
				require.NoError(t, tb.Record(ctx, db, sku, reduce, "k2", 2), "the expired entry is replaced")
				rem, found, err := tb.Seen(ctx, db, sku, reduce, "k2")
				require.NoError(t, err)
				require.True(t, found)
				require.EqualValues(t, 2, rem)
			}},
			{"peek", func(t *testing.T) {
				stock, expired, rem, found, err := tb.Peek(ctx, db, sku, reduce, "k1")
				require.NoError(t, err)
				require.Equal(t, [3]int64{4, 0, 4}, [3]int64{stock, expired, rem})
				require.True(t, found)
				stock, _, _, found, err = tb.Peek(ctx, db, sku, reduce, "")
				require.NoError(t, err)
				require.EqualValues(t, 4, stock)
				require.False(t, found)
				_, _, _, _, err = tb.Peek(ctx, db, unknown, reduce, "k1")
				require.ErrorIs(t, err, inventory.ErrNotFound)
			}},
			{"insert", func(t *testing.T) {
				es := []sqlengine.Entry{{Dir: reduce, Key: "k3", Remaining: 3}, {Dir: driver.DirReturn, Key: "k3", Remaining: 5}}
				ok, err := tb.RecordAll(ctx, db, sku, es)
				require.NoError(t, err)
				require.True(t, ok)
				ok, err = tb.RecordAll(ctx, db, sku, es)
				require.NoError(t, err)
				require.False(t, ok, "already there")
			}},
			{"keys", func(t *testing.T) {
				es, err := tb.Entries(ctx, db, sku, []string{"k1", "k3", "k9"})
				require.NoError(t, err)
				require.ElementsMatch(t, []sqlengine.Entry{
					{Dir: reduce, Key: "k1", Remaining: 4},
					{Dir: reduce, Key: "k3", Remaining: 3},
					{Dir: driver.DirReturn, Key: "k3", Remaining: 5},
				}, es)
			}},
			{"prune", func(t *testing.T) {
				ok, err := short.RecordAll(ctx, db, sku, []sqlengine.Entry{{Dir: reduce, Key: "k4", Remaining: 1}})
				require.NoError(t, err)
				require.True(t, ok)
				time.Sleep(5 * time.Millisecond)
				n, err := tb.Prune(ctx)
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "k4 alone has expired")
				es, err := tb.Entries(ctx, db, sku, []string{"k1", "k4"})
				require.NoError(t, err)
				require.Len(t, es, 1)
			}},
			{"readHolds", func(t *testing.T) {
				rs, err := tb.ReadHolds(ctx, db, []string{sku, unknown})
				require.NoError(t, err)
				require.Equal(t, map[string]sqlengine.Row{sku: {Stock: 4, Version: 4}}, rs)
			}},
			{"reserve", func(t *testing.T) {
				ok, err := tb.Reserve(ctx, db, "h1", []inventory.Line{{SKU: sku, Qty: 1}}, time.Hour)
				require.NoError(t, err)
				require.True(t, ok)
				ok, err = tb.Reserve(ctx, db, "h1", []inventory.Line{{SKU: sku, Qty: 1}}, time.Hour)
				require.NoError(t, err)
				require.False(t, ok, "h1 exists")
				ok, err = tb.Reserve(ctx, db, "h2", []inventory.Line{{SKU: sku, Qty: 2}, {SKU: unknown, Qty: 1}}, time.Millisecond)
				require.NoError(t, err)
				require.True(t, ok, "two lines")
			}},
			{"lines", func(t *testing.T) {
				ls, now, err := tb.Lines(ctx, db, "h1", false)
				require.NoError(t, err)
				require.Len(t, ls, 1)
				l := ls[0]
				require.Equal(t, inventory.Line{SKU: sku, Qty: 1}, l.Line)
				require.Equal(t, sqlengine.Held, l.State)
				require.False(t, l.Ended.Valid)
				require.InDelta(t, time.Hour.Microseconds(), l.Expires-now, float64(time.Minute.Microseconds()),
					"expires an hour from the database's now")
				require.InDelta(t, time.Now().UnixMicro(), now, float64(time.Minute.Microseconds()), "now is Unix µs")
				ls, _, err = tb.Lines(ctx, db, "h2", false)
				require.NoError(t, err)
				require.Len(t, ls, 2)
				require.Less(t, ls[0].SKU, ls[1].SKU, "by SKU")
			}},
			{"lockLines", func(t *testing.T) {
				require.NoError(t, tb.Tx(ctx, func(tx *sqlx.Tx) error {
					ls, _, err := tb.Lines(ctx, tx, "h1", true)
					require.Len(t, ls, 1)
					return err
				}))
			}},
			{"held", func(t *testing.T) {
				n, err := tb.Held(ctx, db, sku)
				require.NoError(t, err)
				require.EqualValues(t, 3, n, "h1 and h2, expired or not")
				_, err = tb.Held(ctx, db, unknown)
				require.ErrorIs(t, err, inventory.ErrNotFound, "no stock row")
			}},
			{"lockHolds", func(t *testing.T) {
				time.Sleep(5 * time.Millisecond) // h2 expires
				require.NoError(t, tb.Tx(ctx, func(tx *sqlx.Tx) error {
					r, err := tb.LockHolds(ctx, tx, sku)
					require.Equal(t, sqlengine.Row{Stock: 4, Version: 4, Expired: true}, r)
					return err
				}))
				err := tb.Tx(ctx, func(tx *sqlx.Tx) error { _, err := tb.LockHolds(ctx, tx, unknown); return err })
				require.ErrorIs(t, err, inventory.ErrNotFound)
				_, ok, err := tb.Move(ctx, db, sku, -1, 1, math.MaxInt64)
				require.NoError(t, err)
				require.False(t, ok, "move refuses a SKU with expired holds")
				stock, expired, _, _, err := tb.Peek(ctx, db, sku, reduce, "")
				require.NoError(t, err)
				require.Equal(t, [2]int64{4, 2}, [2]int64{stock, expired}, "peek sums the expired holds")
			}},
			{"expired", func(t *testing.T) {
				refs, units, err := tb.Expired(ctx, db, sku)
				require.NoError(t, err)
				require.Equal(t, []sqlengine.Ref{{ID: "h2", Qty: 2}}, refs)
				require.EqualValues(t, 2, units)
			}},
			{"due", func(t *testing.T) {
				ids, err := tb.Due(ctx, db, 10)
				require.NoError(t, err)
				require.Equal(t, []string{"h2"}, ids)
			}},
			{"release", func(t *testing.T) {
				ok, err := tb.Release(ctx, db, sku, []sqlengine.Ref{{ID: "h2", Qty: 2}})
				require.NoError(t, err)
				require.True(t, ok)
				ok, err = tb.Release(ctx, db, sku, []sqlengine.Ref{{ID: "h2", Qty: 2}})
				require.NoError(t, err)
				require.False(t, ok, "h2 is no longer held")
				ls, _, err := tb.Lines(ctx, db, "h2", false)
				require.NoError(t, err)
				states := map[string]string{}
				for _, l := range ls {
					states[l.SKU] = l.State
				}
				require.Equal(t, map[string]string{sku: sqlengine.Expired, unknown: sqlengine.Held}, states,
					"the line of the other SKU stays held")
			}},
			{"confirm", func(t *testing.T) {
				n, err := tb.ConfirmHold(ctx, db, "h1")
				require.NoError(t, err)
				require.EqualValues(t, 1, n)
				n, err = tb.ConfirmHold(ctx, db, "h1")
				require.NoError(t, err)
				require.Zero(t, n, "no longer held")
				n, err = tb.ConfirmHold(ctx, db, "h2")
				require.NoError(t, err)
				require.Zero(t, n, "expired")
			}},
			{"end", func(t *testing.T) {
				n, err := tb.EndHold(ctx, db, "h2", sqlengine.Expired)
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "the line still held")
				n, err = tb.EndHold(ctx, db, "h2", sqlengine.Cancelled)
				require.NoError(t, err)
				require.Zero(t, n)
			}},
			{"forget", func(t *testing.T) {
				n, err := tb.ForgetHold(ctx, db, "h2")
				require.NoError(t, err)
				require.Zero(t, n, "ended less than an hour ago")
				time.Sleep(5 * time.Millisecond)
				n, err = short.ForgetHold(ctx, db, "h2")
				require.NoError(t, err)
				require.EqualValues(t, 2, n)
			}},
			{"pruneHolds", func(t *testing.T) {
				n, err := tb.PruneHolds(ctx)
				require.NoError(t, err)
				require.Zero(t, n)
				n, err = short.PruneHolds(ctx)
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "h1, confirmed")
			}},
			{"shift", func(t *testing.T) {
				cur, err := tb.Get(ctx, sku)
				require.NoError(t, err)
				ok, err := tb.Reserve(ctx, db, "h:4", []inventory.Line{{SKU: sku, Qty: 1}}, -time.Second)
				require.NoError(t, err)
				require.True(t, ok, "a line past its expiry")
				_, ok, err = tb.Move(ctx, db, sku, -1, 1, math.MaxInt64)
				require.NoError(t, err)
				require.False(t, ok, "move: expired holds")
				n, ok, err := tb.Shift(ctx, db, sku, -1, 1, math.MaxInt64)
				require.NoError(t, err)
				require.True(t, ok, "shift does not look at holds")
				require.Equal(t, cur-1, n)
				_, ok, err = tb.Shift(ctx, db, sku, -100, 100, math.MaxInt64)
				require.NoError(t, err)
				require.False(t, ok, "out of range")
				_, ok, err = tb.Shift(ctx, db, unknown, 1, 0, math.MaxInt64)
				require.NoError(t, err)
				require.False(t, ok, "unknown sku")
			}},
		}

		var want, ran []string
		for _, s := range tb.Statements() {
			want = append(want, s.Name)
		}
		for _, s := range steps {
			if !slices.Contains(want, s.stmt) {
				continue // lockTimeout on an engine without it
			}
			ran = append(ran, s.stmt)
			if !t.Run(s.stmt, s.run) {
				t.FailNow() // the later steps build on this one
			}
		}
		slices.Sort(want)
		require.Equal(t, slices.Compact(want), slices.Sorted(slices.Values(ran)), "every statement has a step")
	})
}
