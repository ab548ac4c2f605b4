package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
)

// Locks on three independent Redis servers, stock in a fourth.
func Example() {
	var nodes []redis.UniversalClient
	for _, addr := range []string{"127.0.0.1:6380", "127.0.0.1:6381", "127.0.0.1:6382"} {
		// No retries of the client's own: the lock retries, and a node
		// that is down must answer at once.
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
			ContextTimeoutEnabled: true})
		defer c.Close()
		nodes = append(nodes, c)
	}
	db := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer db.Close()
	defer deleteKeys(db, "example-redlock*")

	store, err := redisstore.New(db, redisstore.WithPrefix("example-redlock"))
	if err != nil {
		log.Fatal(err)
	}
	var stock inventory.StockManager
	stock, err = redlock.New(nodes, store, redlock.WithPrefix("example-redlock:"), redlock.WithAcquireTimeout(3*time.Second))
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

// deleteKeys removes what the example wrote: every key matching pattern.
func deleteKeys(c *redis.Client, pattern string) {
	ctx := context.Background()
	iter := c.Scan(ctx, 0, pattern, 100).Iterator()
	for iter.Next(ctx) {
		c.Unlink(ctx, iter.Val())
	}
}
