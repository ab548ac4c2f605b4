package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/otelstock"
	"github.com/stockkit/inventory/ratelimit"
	"github.com/stockkit/inventory/slogstock"
)

func main() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	var stock inventory.StockManager
	stock, err := luascript.New(client)
	if err != nil {
		log.Fatal(err)
	}
	// Innermost first: logs of the backend's failures, then the token
	// buckets, then spans and metrics (the global OpenTelemetry providers).
	if stock, err = slogstock.Wrap(stock, slogstock.WithLogger(slog.Default())); err != nil {
		log.Fatal(err)
	}
	if stock, err = ratelimit.Wrap(stock, ratelimit.WithGlobal(5000, 500), ratelimit.WithPerSKU(1000, 100)); err != nil {
		log.Fatal(err)
	}
	if stock, err = otelstock.Wrap(stock); err != nil {
		log.Fatal(err)
	}
	_, isOrders := stock.(inventory.OrderManager) // true exactly when luascript's Manager is one
	fmt.Println("order calls:", isOrders)

	if err := stock.Init(ctx, "sneaker-42", 10); err != nil {
		log.Fatal(err)
	}
	_, err = stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("buyer-17"))
	if errors.Is(err, inventory.ErrContention) { // a rate limit too: retry later
		fmt.Println("busy:", err)
	}
}
