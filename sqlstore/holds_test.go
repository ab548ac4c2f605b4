package sqlstore_test

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

// TestHoldStatements runs every hold statement of each engine against the
// real engine, one subtest per statement in the order they build on each
// other, and fails if a statement of the Store's holds has none.
func TestHoldStatements(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		open := func(schema sqlstore.Schema, ttl time.Duration) *sqlstore.Store {
			s, err := sqlstore.New(db, sqlstore.WithSchema(schema), sqlstore.WithKeyTTL(ttl))
			require.NoError(t, err)
			return s
		}
		store := open(sqltest.Schema(t, db), time.Hour)
		tb, h := store.Tables(), store.Holds()
		sku, unknown := testenv.Prefix(), testenv.Prefix()
		for range 4 {
			require.NoError(t, tb.Init(ctx, sku, 4)) // stock 4, version 4, as the steps expect
		}

		steps := []struct {
			stmt string
			run  func(t *testing.T)
		}{
			{"holdLine", func(t *testing.T) {
				ok, err := h.HoldLine(ctx, nil, sku, 4, 3, "h:1", 1, time.Now().Add(-time.Second), nil)
				require.NoError(t, err)
				require.True(t, ok)
				_, err = h.HoldLine(ctx, nil, sku, 5, 2, "h:1", 1, time.Now(), nil)
				require.ErrorIs(t, err, inventory.ErrDuplicate)
				ok, err = h.HoldLine(ctx, nil, sku, 4, 2, "h:2", 1, time.Now(), nil)
				require.NoError(t, err)
				require.False(t, ok, "stale version")
				ok, err = h.HoldLine(ctx, nil, unknown, 1, 2, "h:2", 1, time.Now(), nil)
				require.NoError(t, err)
				require.False(t, ok, "unknown sku")
				ls, _, err := tb.Lines(ctx, db, "h:2", false)
				require.NoError(t, err)
				require.Empty(t, ls, "nothing written")
			}},
			{"holdsOf", func(t *testing.T) {
				stock, version, held, expired, err := h.HoldsOf(ctx, db, sku, 10)
				require.NoError(t, err)
				require.Equal(t, [3]int64{3, 5, 1}, [3]int64{stock, version, held})
				require.Equal(t, []string{"h:1"}, expired, "past its expiry")
				_, _, _, _, err = h.HoldsOf(ctx, db, unknown, 10)
				require.ErrorIs(t, err, inventory.ErrNotFound)
			}},
			{"lockLine", func(t *testing.T) {
				qty, err := h.Unhold(ctx, nil, sku, "h:1", false, nil)
				require.NoError(t, err)
				require.EqualValues(t, 1, qty)
				qty, err = h.Unhold(ctx, nil, sku, "h:1", false, nil)
				require.NoError(t, err)
				require.Zero(t, qty, "gone")
			}},
			{"dropLine", func(t *testing.T) {
				ls, _, err := tb.Lines(ctx, db, "h:1", false)
				require.NoError(t, err)
				require.Empty(t, ls, "unheld lines are deleted")
			}},
			{"give", func(t *testing.T) {
				stock, version, held, _, err := h.HoldsOf(ctx, db, sku, 10)
				require.NoError(t, err)
				require.Equal(t, [3]int64{4, 6, 0}, [3]int64{stock, version, held}, "units back, version moved")
				ok, err := h.HoldLine(ctx, nil, sku, 6, 3, "h:3", 1, time.Now().Add(time.Hour), nil)
				require.NoError(t, err)
				require.True(t, ok)
				qty, err := h.Unhold(ctx, nil, sku, "h:3", true, nil)
				require.NoError(t, err)
				require.EqualValues(t, 1, qty)
				n, err := tb.Get(ctx, sku)
				require.NoError(t, err)
				require.EqualValues(t, 3, n, "sold: not given back")
			}},
			{"createOrder", func(t *testing.T) {
				o, ok, err := h.CreateOrder(ctx, nil, "o:1", []byte(`[{"SKU":"a","Qty":1}]`), time.Hour, time.Minute)
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, "held", o.State)
				require.Equal(t, `[{"SKU":"a","Qty":1}]`, string(o.Lines))
				require.InDelta(t, time.Hour.Microseconds(), o.Expires-o.Now, float64(time.Minute.Microseconds()))
				// Abandoned the grace after it is recorded, whatever the TTL.
				require.Equal(t, (time.Minute - time.Hour).Microseconds(), o.Abandon-o.Expires)
				_, ok, err = h.CreateOrder(ctx, nil, "o:1", []byte(`[]`), time.Hour, time.Minute)
				require.NoError(t, err)
				require.False(t, ok, "exists")
			}},
			{"order", func(t *testing.T) {
				o, found, err := h.ReadOrder(ctx, db, "o:1", false)
				require.NoError(t, err)
				require.True(t, found)
				require.False(t, o.Complete || o.Done || o.Kept.Valid)
				_, found, err = h.ReadOrder(ctx, db, "o:9", false)
				require.NoError(t, err)
				require.False(t, found)
			}},
			{"lockOrder", func(t *testing.T) {
				require.NoError(t, tb.Tx(ctx, func(tx *sqlx.Tx) error {
					_, found, err := h.ReadOrder(ctx, tx, "o:1", true)
					require.True(t, found)
					return err
				}))
			}},
			{"dueOrders", func(t *testing.T) {
				_, ok, err := h.CreateOrder(ctx, nil, "o:2", []byte(`[]`), time.Millisecond, 0)
				require.NoError(t, err)
				require.True(t, ok)
				time.Sleep(5 * time.Millisecond)
				ids, err := h.DueOrders(ctx, db, 10)
				require.NoError(t, err)
				require.Equal(t, []string{"o:2"}, ids)
			}},
			{"setOrder", func(t *testing.T) {
				o, _, err := h.ReadOrder(ctx, db, "o:2", false)
				require.NoError(t, err)
				o.State, o.Done, o.Kept = "expired", true, sql.NullInt64{Int64: o.Now - 1, Valid: true}
				require.NoError(t, h.SetOrder(ctx, db, "o:2", o, o.Expires))
				got, _, err := h.ReadOrder(ctx, db, "o:2", false)
				require.NoError(t, err)
				require.Equal(t, [2]any{"expired", true}, [2]any{got.State, got.Done})
				ids, err := h.DueOrders(ctx, db, 10)
				require.NoError(t, err)
				require.Empty(t, ids, "done")
			}},
			{"forgetOrder", func(t *testing.T) {
				_, ok, err := h.CreateOrder(ctx, nil, "o:2", []byte(`[]`), time.Hour, 0)
				require.NoError(t, err)
				require.True(t, ok, "the done record kept past its time is forgotten")
			}},
			{"dropOrder", func(t *testing.T) {
				require.NoError(t, h.DropOrder(ctx, db, "o:2"))
				_, found, err := h.ReadOrder(ctx, db, "o:2", false)
				require.NoError(t, err)
				require.False(t, found)
			}},
			{"pruneOrders", func(t *testing.T) {
				o, _, err := h.ReadOrder(ctx, db, "o:1", false)
				require.NoError(t, err)
				o.Done, o.Kept = true, sql.NullInt64{Int64: o.Now - 1, Valid: true}
				require.NoError(t, h.SetOrder(ctx, db, "o:1", o, o.Expires))
				n, err := h.PruneOrders(ctx)
				require.NoError(t, err)
				require.EqualValues(t, 1, n)
			}},
		}

		var want, ran []string
		for _, s := range h.Statements() {
			want = append(want, s.Name)
		}
		for _, s := range steps {
			ran = append(ran, s.stmt)
			if !t.Run(s.stmt, s.run) {
				t.FailNow() // the later steps build on this one
			}
		}
		require.Equal(t, slices.Sorted(slices.Values(want)), slices.Sorted(slices.Values(ran)), "every statement has a step")
	})
}

var update = flag.Bool("update", false, "rewrite testdata/statements.golden")

// TestGolden renders every engine's hold statements for the default
// schema and compares them with testdata/statements.golden (go test -run
// TestGolden -update rewrites it).
func TestGolden(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Every hold statement of every engine for the default schema.\n" +
		"# Regenerate: go test ./sqlstore -run TestGolden -update\n")
	for _, driver := range []string{"mysql", "postgres", "sqlite"} {
		s, err := sqlstore.New(sqlx.NewDb(nil, driver))
		require.NoError(t, err)
		for _, st := range s.Holds().Statements() {
			fmt.Fprintf(&b, "\n-- %s %s --\n%s\n", s.Tables().Engine, st.Name, st.SQL)
		}
	}
	path := filepath.Join("testdata", "statements.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), b.String(), "run with -update and review the diff")
}
