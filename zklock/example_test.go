package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/zklock"
)

// Locks in ZooKeeper, stock in MariaDB. The first call may come at once:
// it waits for the new connection's session.
func Example() {
	conn, events, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	db, err := sqlx.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx := context.Background()
	schema := sqlstore.Schema{Table: "zklock_example", Ledger: "zklock_example_ledger"}
	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}
	defer db.Exec("DROP TABLE zklock_example, zklock_example_ledger, zklock_example_holds, zklock_example_orders")
	// The Manager reads the session's events, so that a lock held by a
	// session that dropped is known to be lost at once.
	var stock inventory.StockManager
	stock, err = zklock.New(conn, store, zklock.WithSessionEvents(events), zklock.WithRoot("/zklock-example/locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = conn.Delete("/zklock-example/locks", -1); _ = conn.Delete("/zklock-example", -1) }()
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	left, err := stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("buyer-7"))
	switch {
	case errors.Is(err, inventory.ErrInsufficientStock):
		fmt.Println("sold out")
	case errors.Is(err, inventory.ErrDuplicate):
		fmt.Println("buyer-7 already has one; left:", left)
	case errors.Is(err, inventory.ErrContention):
		fmt.Println("busy; nothing was taken, try again")
	case err != nil:
		log.Fatal(err) // a server failed: nothing was taken
	default:
		fmt.Println("sold one; left:", left)
	}
	// Output: sold one; left: 9
}
