package main

import (
	"context"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/luascript"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	stock, err := luascript.New(client, luascript.WithLedger(0)) // or optimistic/rowlock WithLedger()
	if err != nil {
		log.Fatal(err)
	}
	notify := func(ctx context.Context, ev ledger.Event) error { // deduplicate on ev.ID
		log.Printf("%s: %s %s (available %d -> %d)", ev.ID, ev.Entry.SKU, ev.Kind, ev.Before, ev.Entry.After.Available)
		return nil // an error: the event comes again at the next poll
	}
	cursors := &ledger.MemoryCursors{} // a CursorStore of your own to resume after a restart
	feed, err := ledger.NewFeed(stock, []string{"sneaker-42", "hat"}, notify,
		ledger.WithThreshold(5), ledger.WithSKUThreshold("hat", 2), ledger.WithCursors(cursors))
	if err != nil {
		log.Fatal(err)
	}
	// Until SIGINT or SIGTERM: every second, the events of the new entries.
	_ = feed.Run(ctx, time.Second, func(err error) { log.Print(err) })
}
