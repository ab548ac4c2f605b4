package tiered_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/tiered"
)

// A flash sale served by Redis, with MariaDB/MySQL keeping the stock of
// record: create the tables once, run the syncer, sell, and drain the
// journal so that SQL has every sale. (Here the keys and tables are named
// for this run and removed at the end.)
func Example() {
	ctx := context.Background()
	// ContextTimeoutEnabled: each call's ctx bounds its network I/O.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	db, err := sqlx.Open("mysql", "root@tcp(127.0.0.1:3306)/test")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	run := fmt.Sprintf("example_tiered_%d", os.Getpid())
	defer removeKeys(client, run)
	defer db.Exec("DROP TABLE IF EXISTS " + run + "_stock, " + run + "_grants, " + run + "_synced, " + run + "_keys")

	m, err := tiered.New(client, db, tiered.WithPrefix(run), tiered.WithTablePrefix(run+"_"), tiered.WithChunk(4))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}
	syncer, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { // applies Redis's journal to SQL until stopped
		defer close(stopped)
		m.Run(syncer)
	}()
	defer func() { stop(); <-stopped }()

	var stock inventory.StockManager = m
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	for _, buyer := range []string{"buyer-7", "buyer-8", "buyer-7"} {
		left, err := stock.Reduce(ctx, "sneaker-42", 3, inventory.WithKey(buyer))
		switch {
		case errors.Is(err, inventory.ErrDuplicate):
			fmt.Println(buyer, "already has theirs; left:", left)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println(buyer, "bought 3; left:", left)
		}
	}
	if err := m.Drain(ctx); err != nil { // SQL now has every sale
		log.Fatal(err)
	}
	drift, err := m.Reconcile(ctx, "sneaker-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("SQL and Redis agree:", drift[0].Clean())
	// Output:
	// buyer-7 bought 3; left: 7
	// buyer-8 bought 3; left: 4
	// buyer-7 already has theirs; left: 7
	// SQL and Redis agree: true
}

// removeKeys deletes every Redis key that begins with prefix.
func removeKeys(client *redis.Client, prefix string) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		client.Unlink(ctx, iter.Val())
	}
}
