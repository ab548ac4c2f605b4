package optimistic_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

// A shop on MariaDB/MySQL: create the tables once, then sell. (Here the
// tables are named for this run and dropped at the end.)
func Example() {
	ctx := context.Background()
	db, err := sqlx.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	schema := sqlstore.Schema{Table: fmt.Sprintf("shop_%d", os.Getpid()), Ledger: fmt.Sprintf("shop_keys_%d", os.Getpid())}
	defer db.Exec("DROP TABLE IF EXISTS " + schema.Table + ", " + schema.Ledger + ", " + schema.Table + "_holds, " + schema.Table + "_orders")

	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}

	var m inventory.StockManager
	m, err = optimistic.New(db, optimistic.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Init(ctx, "sneaker-42", 3); err != nil {
		log.Fatal(err)
	}
	left, err := m.Reduce(ctx, "sneaker-42", 2, inventory.WithKey("order-1001"))
	fmt.Println(left, err)
	// The client timed out and sends the order again: nothing is taken twice.
	left, err = m.Reduce(ctx, "sneaker-42", 2, inventory.WithKey("order-1001"))
	fmt.Println(left, errors.Is(err, inventory.ErrDuplicate))
	left, err = m.Reduce(ctx, "sneaker-42", 2)
	fmt.Println(left, errors.Is(err, inventory.ErrInsufficientStock))
	// Output:
	// 1 <nil>
	// 1 true
	// 1 true
}

// On PostgreSQL, through pgx, in single-statement mode, on an existing
// products(id, stock, version) table. (Here the table is created for this
// run and dropped at the end, with the ledger.)
func ExampleWithSingleStatement() {
	ctx := context.Background()
	db, err := sqlx.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	products, ledger := fmt.Sprintf("products_%d", os.Getpid()), fmt.Sprintf("stock_keys_%d", os.Getpid())
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+products+
		` (id TEXT COLLATE "C" PRIMARY KEY, stock BIGINT NOT NULL, version BIGINT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	defer db.Exec("DROP TABLE IF EXISTS " + products + ", " + ledger + ", " + products + "_holds, " + products + "_orders")
	schema := sqlstore.Schema{Table: products, SKU: "id", Ledger: ledger}
	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTables(ctx); err != nil { // the ledger; products exists
		log.Fatal(err)
	}

	m, err := optimistic.New(db, optimistic.WithSchema(schema), optimistic.WithSingleStatement())
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Init(ctx, "sneaker-42", 2); err != nil {
		log.Fatal(err)
	}
	left, err := m.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("order-1002"))
	fmt.Println(left, err)
	left, err = m.Reduce(ctx, "sneaker-42", 2)
	fmt.Println(left, errors.Is(err, inventory.ErrInsufficientStock))
	// Output:
	// 1 <nil>
	// 1 true
}
