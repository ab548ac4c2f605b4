package faulttest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/ledger"
)

// SQLEngines are the private SQL servers a fault test can start.
var SQLEngines = []struct {
	Name  string
	Start func(testing.TB) *SQLServer
}{{"mariadb", StartMariaDB}, {"postgres", StartPostgres}}

// LedgerManager is a SQL strategy's Manager that keeps a ledger and
// creates its own tables.
type LedgerManager interface {
	inventory.StockManager
	inventory.OrderManager
	ledger.Reader
	CreateTables(ctx context.Context) error
}

// SQLLedgerKilled runs [inventorytest.RunLedgerFaults] on a private
// MariaDB and a private PostgreSQL, in parallel (subtests named after the
// engines), each SIGKILLed mid-sale and restarted on its data directory,
// through the engine's crash recovery. newManagers returns a strategy's
// Managers over db, one per mode it has, each keeping a ledger: the sale
// sends its calls to each in turn, on the same rows (a hold reserved by
// one mode may be confirmed by another), so that one crash strikes every
// mode. The first Manager creates the tables. The sale has buyers
// buyers: a few hundred at most keeps the test within half a minute on a
// loaded machine.
func SQLLedgerKilled(t *testing.T, buyers int, newManagers func(t *testing.T, db *sqlx.DB) []LedgerManager) {
	for _, eng := range SQLEngines {
		t.Run(eng.Name, func(t *testing.T) {
			t.Parallel()
			srv := eng.Start(t)
			db := srv.Open(t, 16)
			ms := newManagers(t, db)
			if err := ms[0].CreateTables(context.Background()); err != nil {
				t.Fatalf("create tables: %v", err)
			}
			inventorytest.RunLedgerFaults(t, inventorytest.LedgerFaults{
				NewManager: func(t *testing.T) inventory.StockManager { return &alternate{ms: ms} },
				Kill:       srv.Kill,
				Restart:    srv.Start,
				Buyers:     buyers,
			})
		})
	}
}

// alternate sends each call to the next of ms.
type alternate struct {
	ms []LedgerManager
	n  atomic.Uint64
}

func (a *alternate) next() LedgerManager { return a.ms[a.n.Add(1)%uint64(len(a.ms))] }

func (a *alternate) Init(ctx context.Context, sku string, qty int64) error {
	return a.next().Init(ctx, sku, qty)
}

func (a *alternate) Get(ctx context.Context, sku string) (int64, error) {
	return a.next().Get(ctx, sku)
}

func (a *alternate) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return a.next().Reduce(ctx, sku, qty, opts...)
}

func (a *alternate) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return a.next().Return(ctx, sku, qty, opts...)
}

func (a *alternate) ReduceLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return a.next().ReduceLines(ctx, lines, opts...)
}

func (a *alternate) ReturnLines(ctx context.Context, lines []inventory.Line, opts ...inventory.Option) error {
	return a.next().ReturnLines(ctx, lines, opts...)
}

func (a *alternate) Reserve(ctx context.Context, id string, lines []inventory.Line, ttl time.Duration) error {
	return a.next().Reserve(ctx, id, lines, ttl)
}

func (a *alternate) Confirm(ctx context.Context, id string) error { return a.next().Confirm(ctx, id) }
func (a *alternate) Cancel(ctx context.Context, id string) error  { return a.next().Cancel(ctx, id) }

func (a *alternate) Held(ctx context.Context, sku string) (int64, error) {
	return a.next().Held(ctx, sku)
}

func (a *alternate) Sweep(ctx context.Context) (int, error) { return a.next().Sweep(ctx) }

func (a *alternate) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	return a.next().Entries(ctx, sku, after, limit)
}

// LedgerRuns runs 32 goroutines of calls on sku, which Init set to stock,
// through m: mostly unkeyed Reduces of one unit with no reference, which
// a strategy that merges calls writes as runs, among them Returns, calls
// of another size (the last calls of each goroutine, from bigFrom on),
// calls refused for want of stock, and calls with a reference or a key,
// all of which break the runs. It then checks sku's ledger
// (ledger.Check: it replays to the stock) and that it holds one entry per
// call that took effect, and Init's.
func LedgerRuns(t *testing.T, m interface {
	inventory.StockManager
	ledger.Reader
}, sku string, calls, bigFrom int) {
	t.Helper()
	ctx := context.Background()
	var took atomic.Int64
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range calls {
				var opts []inventory.Option
				switch (g + i) % 17 {
				case 3:
					opts = append(opts, inventory.WithRef(fmt.Sprint("ref ", g, i)))
				case 5:
					opts = append(opts, inventory.WithKey(fmt.Sprint("key ", g, i)))
				}
				var err error
				if i%7 == 6 {
					_, err = m.Return(ctx, sku, int64(1+g%2), opts...)
				} else {
					_, err = m.Reduce(ctx, sku, int64(1+i/bigFrom), opts...) // mostly 1
				}
				if err == nil {
					took.Add(1)
				} else if !errors.Is(err, inventory.ErrInsufficientStock) {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if _, err := ledger.Check(ctx, m, m, sku); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range ledger.History(ctx, m, sku, 0) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if want := took.Load() + 1; int64(n) != want {
		t.Errorf("%d entries of %s, want %d: one per call that took effect, and the Init", n, sku, want)
	}
}
