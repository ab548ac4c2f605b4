package inventorytest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
)

// Fuzz compares m, call by call, with the reference [Memory] on SKUs,
// quantities and keys chosen by the fuzzer, valid or not. Both start empty:
// m must use a namespace (key prefix, table) of its own. Run it from a fuzz
// target; `go test` runs the seed corpus, `go test -fuzz` explores.
//
//	func FuzzManager(f *testing.F) { inventorytest.Fuzz(f, newManagerWithFreshPrefix(f)) }
func Fuzz(f *testing.F, m inventory.StockManager) {
	ref := NewMemory(0)
	for _, seed := range []struct {
		op        uint8
		sku       string
		init, qty int64
		key       string
	}{
		{0, "shoe", 10, 3, ""},
		{1, "shoe", 10, 3, "k"},
		{2, "shoe", inventory.MaxStock, 1, "k"},
		{1, "'; DROP TABLE x; --", 5, 6, ""},
		{1, "{tag}", 1, 1, "{tag}"},
		{3, "", 1, 0, ""},
		{1, "a\x00b", 1, 1, ""},
		{2, "鞋", 0, inventory.MaxStock + 1, "鍵"},
		{1, "x", -1, -1, "\xff"},
	} {
		f.Add(seed.op, seed.sku, seed.init, seed.qty, seed.key)
	}
	f.Fuzz(func(t *testing.T, op uint8, sku string, init, qty int64, key string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var opts []inventory.Option
		if op&4 != 0 {
			opts = append(opts, inventory.WithKey(key))
		}
		if op&8 != 0 {
			same(t, "Init", ref.Init(ctx, sku, init), m.Init(ctx, sku, init), 0, 0)
		}
		var want, got int64
		var werr, gerr error
		switch op & 3 {
		case 0:
			werr, gerr = ref.Init(ctx, sku, qty), m.Init(ctx, sku, qty)
		case 1:
			want, werr = ref.Reduce(ctx, sku, qty, opts...)
			got, gerr = m.Reduce(ctx, sku, qty, opts...)
		case 2:
			want, werr = ref.Return(ctx, sku, qty, opts...)
			got, gerr = m.Return(ctx, sku, qty, opts...)
		case 3:
			want, werr = ref.Get(ctx, sku)
			got, gerr = m.Get(ctx, sku)
		}
		same(t, "call", werr, gerr, want, got)
		if driver.ValidateSKU(sku) == nil {
			want, werr = ref.Get(ctx, sku)
			got, gerr = m.Get(ctx, sku)
			same(t, "Get after", werr, gerr, want, got)
		}
	})
}

var sentinels = []error{inventory.ErrInsufficientStock, inventory.ErrNotFound,
	inventory.ErrInvalidArgument, inventory.ErrContention, inventory.ErrDuplicate}

// same fails t unless the manager's outcome matches the reference's.
func same(t *testing.T, what string, werr, gerr error, want, got int64) {
	t.Helper()
	if werr == nil && gerr == nil {
		if want != got {
			t.Fatalf("%s: got %d, reference %d", what, got, want)
		}
		return
	}
	for _, s := range sentinels {
		if errors.Is(werr, s) != errors.Is(gerr, s) {
			t.Fatalf("%s: got error %v, reference %v", what, gerr, werr)
		}
	}
	if werr == nil || gerr == nil {
		t.Fatalf("%s: got error %v, reference %v", what, gerr, werr)
	}
	if (errors.Is(werr, inventory.ErrDuplicate) || errors.Is(werr, inventory.ErrInsufficientStock)) && want != got {
		t.Fatalf("%s: %v with %d, reference %d", what, gerr, got, want)
	}
}
