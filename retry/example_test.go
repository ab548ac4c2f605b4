package retry_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/retry"
)

// lostReply is a manager whose first Reduce takes effect but whose reply
// is lost, as when a timeout cuts a call the server applied.
type lostReply struct {
	*inventorytest.Memory
	lost bool
}

func (m *lostReply) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	n, err := m.Memory.Reduce(ctx, sku, qty, opts...)
	if err == nil && !m.lost {
		m.lost = true
		return 0, errors.New("read tcp 127.0.0.1:6379: i/o timeout")
	}
	return n, err
}

// A buyer's Reduce whose reply was lost is made again with the same key:
// the repeat says the first took effect, and the stock moved once.
func ExampleDo() {
	ctx := context.Background()
	m := &lostReply{Memory: inventorytest.NewMemory(0)}
	_ = m.Init(ctx, "sneaker-42", 10)

	rem, err := retry.Do(ctx, "buyer-17", func(ctx context.Context, opts ...inventory.Option) (int64, error) {
		return m.Reduce(ctx, "sneaker-42", 1, opts...)
	})
	switch {
	case err == nil, errors.Is(err, inventory.ErrDuplicate):
		fmt.Println("bought once; remaining", rem)
	case errors.Is(err, inventory.ErrInsufficientStock):
		fmt.Println("sold out")
	default:
		fmt.Println("no verdict; the outcome is unknown:", err)
	}
	n, _ := m.Get(ctx, "sneaker-42")
	fmt.Println("stock", n)
	// Output:
	// bought once; remaining 9
	// stock 9
}
