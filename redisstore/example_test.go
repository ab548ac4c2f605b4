package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// A Store is the storage half of a lock strategy.
func Example() {
	// ContextTimeoutEnabled: each call's ctx bounds its network I/O.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	defer removeKeys(client, "example-redisstore") // what this example wrote

	store, err := redisstore.New(client, redisstore.WithPrefix("example-redisstore"))
	if err != nil {
		log.Fatal(err)
	}
	stock, err := redislock.New(client, store, redislock.WithPrefix("example-redisstore"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	left, err := stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("buyer-7"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left:", left)
	// Output: left: 9
}

// CompareAndSet writes only if the stock is still what was read.
func ExampleStore_CompareAndSet() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	defer removeKeys(client, "example-cas") // what this example wrote
	store, err := redisstore.New(client, redisstore.WithPrefix("example-cas"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	stock, version, err := store.Read(ctx, "sneaker-42")
	if err != nil {
		log.Fatal(err)
	}
	ok, err := store.CompareAndSet(ctx, "sneaker-42", version, stock-1, driver.DirReduce, "order-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("written:", ok)
	// Output: written: true
}

// removeKeys deletes every key that begins with prefix.
func removeKeys(client *redis.Client, prefix string) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		client.Unlink(ctx, iter.Val())
	}
}
