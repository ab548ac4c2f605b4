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
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	var stock inventory.StockManager
	stock, err := luascript.New(client, luascript.WithPrefix("shop"))
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
}
