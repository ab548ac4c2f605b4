package slogstock_test

import (
	"context"
	"errors"
	"log"
	"log/slog"
	"os"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/slogstock"
)

// down is a manager whose backend is unreachable.
type down struct{ *inventorytest.Memory }

func (down) Reduce(context.Context, string, int64, ...inventory.Option) (int64, error) {
	return 0, errors.New("dial tcp 127.0.0.1:6379: connection refused")
}

// Failures are logged with their call; sold out is not.
func ExampleWrap() {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey || a.Key == "duration" { // for a stable example
				return slog.Attr{}
			}
			return a
		},
	}))
	m, err := slogstock.Wrap(down{inventorytest.NewMemory(0)}, slogstock.WithLogger(logger), slogstock.WithStrategy("luascript"))
	if err != nil {
		log.Fatal(err)
	}
	_, _ = m.Reduce(ctx, "sneaker-42", 1, inventory.WithKey("buyer-17"))
	// Output:
	// level=ERROR msg="inventory: reduce error" op=reduce strategy=luascript sku=sneaker-42 qty=1 key=buyer-17 outcome=error err="dial tcp 127.0.0.1:6379: connection refused"
}
