package sqllock_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
)

// A lock strategy on PostgreSQL alone: advisory locks, stock in sqlstore.
func Example() {
	ctx := context.Background()
	db, err := sqlx.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// The locks get a pool of their own: a held lock, and each SKU's
	// waiter, pin a connection of it.
	locks, err := sqlx.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close()
	// Tables named for this run, dropped at the end.
	schema := sqlstore.Schema{Table: fmt.Sprintf("sqllock_%d", os.Getpid()), Ledger: fmt.Sprintf("sqllock_keys_%d", os.Getpid())}
	defer db.Exec("DROP TABLE IF EXISTS " + schema.Table + ", " + schema.Ledger + ", " + schema.Table + "_holds, " + schema.Table + "_orders")
	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}
	m, err := sqllock.New(locks, store)
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.Reduce(ctx, "sneaker-42", 3))
	fmt.Println(m.Reduce(ctx, "sneaker-42", 8))
	// Output:
	// 7 <nil>
	// 7 sqllock: reduce "sneaker-42": inventory: insufficient stock: has 7, asked 8
}
