package luascript_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/luascript"
)

func Example() {
	// ContextTimeoutEnabled: each call's ctx bounds its network I/O.
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()
	defer removeKeys(client, "example-luascript") // what this example wrote

	var stock inventory.StockManager
	stock, err := luascript.New(client, luascript.WithPrefix("example-luascript"))
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
	case err != nil:
		log.Fatal(err) // the server failed: nothing was taken
	default:
		fmt.Println("sold one; left:", left)
	}
	// Output: sold one; left: 9
}

// removeKeys deletes every key that begins with prefix.
func removeKeys(client *redis.Client, prefix string) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		client.Unlink(ctx, iter.Val())
	}
}
