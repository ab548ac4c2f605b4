package redisstore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

// A Store is the storage half of a lock strategy.
func Example() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	store, err := redisstore.New(client, redisstore.WithPrefix("shop"))
	if err != nil {
		log.Fatal(err)
	}
	stock, err := redislock.New(client, store)
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
}

// CompareAndSet writes only if the stock is still what was read.
func ExampleStore_CompareAndSet() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()
	store, err := redisstore.New(client, redisstore.WithPrefix("shop"))
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
	ok, err := store.CompareAndSet(ctx, "sneaker-42", version, stock-1, inventory.DirReduce, "order-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("written:", ok)
}
