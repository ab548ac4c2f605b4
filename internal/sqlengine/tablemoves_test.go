package sqlengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
)

// TestMySQLLiterals: integers in decimal, strings in hexadecimal whatever
// they hold, and an error for a placeholder or an argument too many or an
// argument of another type.
func TestMySQLLiterals(t *testing.T) {
	got, err := sqlengine.MySQLLiterals("SELECT ?, ?, ?, ? FROM t", []any{int64(-42), "a'b\\c?", "", "é"})
	require.NoError(t, err)
	require.Equal(t, `SELECT -42, X'6127625c633f', X'', X'c3a9' FROM t`, got)
	for _, bad := range []struct {
		q    string
		args []any
	}{{"SELECT ?, ?", []any{int64(1)}}, {"SELECT ?", []any{int64(1), int64(2)}}, {"SELECT ?", []any{1}}} {
		_, err := sqlengine.MySQLLiterals(bad.q, bad.args)
		require.Error(t, err, "%q %v", bad.q, bad.args)
	}
}

// TestMoveLogged: a move and its entries, each with the stock after it and
// a reference no literal can break, written together in order, or, when
// the stock is out of the move's range, neither; on MariaDB in one
// compound statement and in the transaction MySQL gets.
func TestMoveLogged(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		p := testenv.Prefix()
		schema := sqldialect.Schema{Table: "stock_" + p, Ledger: "ledger_" + p}
		sqltest.Drop(t, db, schema.Table, schema.Ledger)
		tb := sqltest.Tables(t, db, sqlengine.Config{Schema: schema, KeyTTL: time.Hour, Moves: true})
		require.NoError(t, tb.CreateTables(ctx))
		modes := []string{"one round trip"}
		if tb.Engine == sqldialect.MySQL {
			modes = append(modes, "transaction")
		}
		for _, mode := range modes {
			if mode == "transaction" {
				tb.NoCompound()
			}
			sku := testenv.Prefix()
			require.NoError(t, tb.Init(ctx, sku, 10))
			ref := "o'r\\d\"? é;--"
			// Available: each entry's offset from the stock before the move;
			// two runs (reduce 1 twice, return 2 twice).
			ms := []sqlengine.Move{
				{SKU: sku, Kind: ledger.Reduce, Units: 1, Available: -1, Ref: ref},
				{SKU: sku, Kind: ledger.Reduce, Units: 1, Available: -2},
				{SKU: sku, Kind: ledger.Reduce, Units: 1, Available: -3},
				{SKU: sku, Kind: ledger.Reduce, Units: 4, Available: -7, Key: "k1"},
				{SKU: sku, Kind: ledger.Return, Units: 2, Available: -5},
				{SKU: sku, Kind: ledger.Return, Units: 2, Available: -3},
			}
			after, ok, err := tb.MoveLogged(ctx, sku, -3, 7, 100, ms)
			require.NoError(t, err, mode)
			require.True(t, ok, mode)
			require.EqualValues(t, 7, after, mode)
			_, ok, err = tb.MoveLogged(ctx, sku, -1, 8, 100, ms[:1]) // 7 is out of 8..100
			require.NoError(t, err, mode)
			require.False(t, ok, mode)
			n, err := tb.Get(ctx, sku)
			require.NoError(t, err)
			require.EqualValues(t, 7, n, mode)
			es, err := tb.ReadMoves(ctx, db, sku, 0, 10)
			require.NoError(t, err, mode)
			type entry struct {
				kind            ledger.Kind
				units, av, sold int64
				key, ref        string
			}
			want := []entry{{ledger.Reduce, 1, 9, 1, "", ref}, {ledger.Reduce, 1, 8, 2, "", ""}, {ledger.Reduce, 1, 7, 3, "", ""},
				{ledger.Reduce, 4, 3, 7, "k1", ""}, {ledger.Return, 2, 5, 5, "", ""}, {ledger.Return, 2, 7, 3, "", ""}}
			got := func(es []ledger.Entry) []entry {
				var out []entry
				for i, e := range es {
					out = append(out, entry{e.Kind, e.Units, e.After.Available, e.After.Sold, e.Key, e.Ref})
					if i > 0 {
						require.Greater(t, e.Pos, es[i-1].Pos, "positions in order")
					}
				}
				return out
			}
			require.Equal(t, want, got(es), mode)
			for from := range es { // pages from every cursor, runs cut
				page, err := tb.ReadMoves(ctx, db, sku, es[from].Pos, 2)
				require.NoError(t, err, mode)
				require.Equal(t, len(want[from+1:min(from+3, len(want))]), len(page), "%s: from entry %d", mode, from)
				if len(page) > 0 {
					require.Equal(t, want[from+1:min(from+3, len(want))], got(page), "%s: from entry %d", mode, from)
				}
			}
		}
	})
}
