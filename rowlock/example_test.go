package rowlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// On MariaDB: wait at most two seconds for a row lock, and let the caller
// decide what to do when the SKU is that busy.
func Example() {
	ctx := context.Background()
	db, err := sqlx.Open("mysql", "shop@tcp(db.internal:3306)/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}

	m, err := rowlock.New(db, rowlock.WithLockTimeout(2*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	left, err := m.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("order-1003"))
	switch {
	case errors.Is(err, inventory.ErrContention):
		fmt.Println("busy, try again")
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println("left:", left)
	}
}
