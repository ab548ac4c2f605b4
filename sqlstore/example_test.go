package sqlstore_test

import (
	"context"
	"fmt"
	"log"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/sqlstore"
)

// The read and compare-and-set that the lock strategies perform while they
// hold a SKU's lock.
func Example() {
	ctx := context.Background()
	db, err := sqlx.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// Tables named for this run, dropped at the end.
	schema := sqlstore.Schema{Table: fmt.Sprintf("store_%d", os.Getpid()), Ledger: fmt.Sprintf("store_keys_%d", os.Getpid())}
	defer db.Exec("DROP TABLE IF EXISTS " + schema.Table + ", " + schema.Ledger + ", " + schema.Table + "_holds, " + schema.Table + "_orders")
	s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := s.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}
	if err := s.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}

	stock, version, err := s.Read(ctx, "sneaker-42")
	if err != nil {
		log.Fatal(err)
	}
	ok, err := s.CompareAndSet(ctx, "sneaker-42", version, stock-3, driver.DirReduce, "order-1")
	fmt.Println(ok, err)
	left, found, err := s.Seen(ctx, "sneaker-42", driver.DirReduce, "order-1")
	fmt.Println(left, found, err)
	ok, err = s.CompareAndSet(ctx, "sneaker-42", version, stock-3, driver.DirReduce, "")
	fmt.Println(ok, err, "(the version moved on)")
	// Output:
	// true <nil>
	// 7 true <nil>
	// false <nil> (the version moved on)
}
