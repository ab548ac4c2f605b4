package bench

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/optimistic"
)

// ledgerRows is how many entries BenchmarkLedgerRowBytes writes: enough
// that the pages of a table dwarf its first, partly empty one.
const ledgerRows = 20000

// BenchmarkLedgerRowBytes measures what one entry of the movement ledger
// takes on disk per engine, indexes included: it writes ledgerRows keyed
// Reduces with a reference (a 24-byte SKU, a 20-byte key, a 16-byte
// reference) through optimistic.WithLedger, then reads the table's size
// as the engine counts it (PostgreSQL pg_total_relation_size; MariaDB
// data_length + index_length after ANALYZE TABLE, InnoDB's estimate in
// 16 KiB pages; SQLite dbstat) and reports bytes per row. Run it with
// -benchtime 1x.
func BenchmarkLedgerRowBytes(b *testing.B) {
	for _, e := range sqltest.Benched {
		b.Run(e.Name, func(b *testing.B) {
			ctx := context.Background()
			db := e.Open(b)
			schema := sqltest.Schema(b, db)
			m, err := optimistic.New(db, optimistic.WithSchema(schema), optimistic.WithLedger())
			if err != nil {
				b.Fatal(err)
			}
			if err := m.CreateTables(ctx); err != nil {
				b.Fatal(err)
			}
			sku := fmt.Sprintf("ledger-bytes-%011d", 0) // 24 bytes
			if err := m.Init(ctx, sku, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			if err := writeLedger(ctx, m, sku, true); err != nil {
				b.Fatal(err)
			}
			size, err := tableBytes(ctx, db, sqldialect.MovesTable(sqldialect.Schema(schema)))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(size)/ledgerRows, "bytes/row")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// writeLedger writes the ledgerRows-1 Reduces of one unit of sku that,
// after its Init, make ledgerRows entries, from 16 goroutines (so merged
// where m merges): keyed with a reference (a 20-byte key, a 16-byte
// reference) when keyed. It returns the first error.
func writeLedger(ctx context.Context, m inventory.StockManager, sku string, keyed bool) error {
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < ledgerRows-1; i += 16 {
				var opts []inventory.Option
				if keyed {
					opts = []inventory.Option{inventory.WithKey(fmt.Sprintf("buyer-%014d", i)),
						inventory.WithRef(fmt.Sprintf("order-%010d", i))}
				}
				if _, err := m.Reduce(ctx, sku, 1, opts...); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil once closed and empty
}

// tableBytes is the size of table with its indexes, as db's engine counts it.
func tableBytes(ctx context.Context, db *sqlx.DB, table string) (int64, error) {
	var n int64
	var err error
	switch db.DriverName() {
	case "mysql":
		if _, err = db.ExecContext(ctx, "ANALYZE TABLE `"+table+"`"); err == nil {
			err = db.GetContext(ctx, &n, `SELECT data_length + index_length FROM information_schema.tables
				WHERE table_schema = DATABASE() AND table_name = ?`, table)
		}
	case "pgx":
		err = db.GetContext(ctx, &n, `SELECT pg_total_relation_size($1::regclass)`, `"`+table+`"`)
	default:
		err = db.GetContext(ctx, &n, `SELECT SUM(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_master WHERE tbl_name = ?)`, table)
	}
	return n, err
}
