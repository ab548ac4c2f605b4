package inventorytest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
)

// A strategy's whole conformance test: say how to make a fresh manager, then
// call Run. Put the function in your package's _test.go file as
// func TestConformance(t *testing.T).
func ExampleRun() {
	testConformance := func(t *testing.T) {
		inventorytest.Run(t, inventorytest.Config{
			NewManager: func(t *testing.T) inventory.StockManager {
				// Your strategy here, e.g. mystrategy.New(client); release
				// what it opens with t.Cleanup.
				return inventorytest.NewMemory(0)
			},
		})
	}
	_ = testConformance
}

// Config can press harder than the defaults (2,000 buyers on 100 units),
// within the race detector's limit of 8,128 goroutines.
func ExampleConfig() {
	testConformance := func(t *testing.T) {
		inventorytest.Run(t, inventorytest.Config{
			NewManager: func(*testing.T) inventory.StockManager { return inventorytest.NewMemory(0) },
			Buyers:     5000,
			Stock:      250,
			Timeout:    5 * time.Minute,
		})
	}
	_ = testConformance
}

// Memory is a correct StockManager in one process: the reference the suite
// is checked against, and a stand-in for unit tests where a real backend is
// not the point.
func ExampleNewMemory() {
	ctx := context.Background()
	stock := inventorytest.NewMemory(time.Hour) // keys kept for an hour
	_ = stock.Init(ctx, "sneaker-42", 3)
	left, err := stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("buyer-7"))
	fmt.Println("left:", left, "error:", err)
	left, err = stock.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("buyer-7"))
	fmt.Println("left:", left, "duplicate:", errors.Is(err, inventory.ErrDuplicate))
	// Output:
	// left: 2 error: <nil>
	// left: 2 duplicate: true
}

// A strategy that implements inventory.OrderManager says so with
// RequireOrders, so the order subtests cannot be skipped by a wrapper that
// hides the methods. A backend whose holds expire on a one-second clock (a
// DATETIME column without fractional seconds) says so with ClockResolution,
// and the suite waits that much longer before it expects a hold expired.
func ExampleConfig_orders() {
	testConformance := func(t *testing.T) {
		inventorytest.Run(t, inventorytest.Config{
			NewManager:      func(*testing.T) inventory.StockManager { return inventorytest.NewMemory(0) },
			RequireOrders:   true,
			ClockResolution: time.Second,
		})
	}
	_ = testConformance
}
