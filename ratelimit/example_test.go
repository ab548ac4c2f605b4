package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/ratelimit"
)

// A burst on one SKU: the calls past the bucket's burst are refused at once
// with ErrContention, before they reach the backend.
func ExampleWrap() {
	ctx := context.Background()
	m, err := ratelimit.Wrap(inventorytest.NewMemory(0),
		ratelimit.WithGlobal(10_000, 1_000), // the whole service
		ratelimit.WithPerSKU(100, 3))        // each SKU: 3 at once, then 100/s
	if err != nil {
		log.Fatal(err)
	}
	_ = m.Init(ctx, "sneaker-42", 10)
	for i := range 5 {
		left, err := m.Reduce(ctx, "sneaker-42", 1)
		switch {
		case errors.Is(err, inventory.ErrContention): // retry later: HTTP 503, Retry-After
			fmt.Println(i, "busy:", errors.Is(err, ratelimit.ErrLimited))
		case err == nil:
			fmt.Println(i, "bought;", left, "left")
		}
	}
	// Output:
	// 0 bought; 9 left
	// 1 bought; 8 left
	// 2 bought; 7 left
	// 3 busy: true
	// 4 busy: true
}
