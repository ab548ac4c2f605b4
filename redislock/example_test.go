package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// deleteKeys removes what an example wrote: every key matching pattern.
func deleteKeys(c *redis.Client, pattern string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		c.Unlink(ctx, iter.Val())
	}
}

// Stock and locks both in Redis.
func Example() {
	// ContextTimeoutEnabled: each call's ctx bounds its network I/O.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	defer deleteKeys(client, "example-redislock*")

	store, err := redisstore.New(client, redisstore.WithPrefix("example-redislock"))
	if err != nil {
		log.Fatal(err)
	}
	var stock inventory.StockManager
	stock, err = redislock.New(client, store, redislock.WithPrefix("example-redislock"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
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

// Stock in SQL, locks in Redis.
func Example_sql() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	defer deleteKeys(client, "example-redislock-sql*")
	db, err := sqlx.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	// Tables named for this run, dropped at the end.
	schema := sqlstore.Schema{Table: fmt.Sprintf("stock_%d", os.Getpid()), Ledger: fmt.Sprintf("stock_keys_%d", os.Getpid())}
	defer db.Exec("DROP TABLE IF EXISTS " + schema.Table + ", " + schema.Ledger + ", " + schema.Table + "_holds, " + schema.Table + "_orders")

	ctx := context.Background()
	store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateTables(ctx); err != nil {
		log.Fatal(err)
	}
	stock, err := redislock.New(client, store, redislock.WithPrefix("example-redislock-sql"))
	if err != nil {
		log.Fatal(err)
	}
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	left, err := stock.Reduce(ctx, "sneaker-42", 2)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left:", left)
	// Output: left: 8
}
