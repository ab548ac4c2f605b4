package main

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

func main() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	store, err := redisstore.New(client) // or a *sqlstore.Store
	if err != nil {
		log.Fatal(err)
	}
	stock, err := redislock.New(client, store) // an inventory.StockManager, as every strategy
	if err != nil {
		log.Fatal(err)
	}
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
}
