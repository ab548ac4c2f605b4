package main

import (
	"context"
	"errors"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/luascript"
)

func main() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:6379",
		ContextTimeoutEnabled: true, // each call's ctx bounds its network I/O
	})
	defer client.Close()

	stock, err := luascript.New(client) // any redis.UniversalClient: Cluster and Sentinel too
	if err != nil {
		log.Fatal(err)
	}
	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}

	buyerID := "buyer-17" // the idempotency key: one purchase per buyer
	left, err := stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey(buyerID))
	switch {
	case errors.Is(err, inventory.ErrInsufficientStock): // sold out; nothing taken
		log.Printf("sold out: %d left", left)
	case errors.Is(err, inventory.ErrDuplicate): // this buyer's call already took effect
		log.Printf("already bought; %d left then", left)
	case err != nil: // server failed; nothing taken: retry with the same key
		log.Fatal(err)
	default: // sold; left units remain
		log.Printf("sold; %d left", left)
	}
}
