package rowlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// On MariaDB: wait at most two seconds for a row lock, and let the caller
// decide what to do when the SKU is that busy. (The tables are named for
// this run and dropped at the end; a shop would keep sqlstore's default
// names.)
func Example() {
	ctx := context.Background()
	db, err := sqlx.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	schema := sqlstore.Schema{
		Table:  fmt.Sprintf("example_stock_%d", os.Getpid()),
		Ledger: fmt.Sprintf("example_ledger_%d", os.Getpid()),
	}
	defer db.Exec("DROP TABLE IF EXISTS " + schema.Table + ", " + schema.Ledger + ", " + schema.Table + "_holds, " + schema.Table + "_orders")
	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}

	m, err := rowlock.New(db, rowlock.WithSchema(schema), rowlock.WithLockTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	if err := m.Init(ctx, "sneaker-42", 5); err != nil {
		log.Fatal(err)
	}
	for range 2 { // the second is the client's resend
		left, err := m.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("order-1003"))
		switch {
		case errors.Is(err, inventory.ErrContention):
			fmt.Println("busy, try again")
		case errors.Is(err, inventory.ErrDuplicate):
			fmt.Println("already taken; left:", left)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("left:", left)
		}
	}
	// Output:
	// left: 4
	// already taken; left: 4
}
