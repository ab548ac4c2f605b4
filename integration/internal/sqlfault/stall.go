package sqlfault

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/netfault"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

// StallDeadlines are the deadlines of the calls of [Stall]: two, so that
// the calls one batch combines do not all give up at once.
var StallDeadlines = []time.Duration{time.Second, 700 * time.Millisecond}

// stallGap is the time between two calls' starts in [Stall]: the calls
// that queue behind a stalled one end at different times.
const stallGap = 60 * time.Millisecond

// Stall runs, on each of [Servers], keyed Reduces and Returns and a Get of
// one SKU, started stallGap apart, through a proxy that blackholes the server: requests go
// through, no answer comes back. Each call must return within its deadline
// (see StallDeadlines) plus [inventory.DeadlineSlack], checked with
// [faulttest.CheckLate], with an error of package pkg wrapping
// context.DeadlineExceeded. Once the network heals, each keyed call is
// retried with its key until it succeeds or is reported a duplicate, and
// then initial - final must equal taken - returned: nothing was applied
// twice or half. Stall returns the worst lateness per server.
func Stall(t *testing.T, pkg string, newManager func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) inventory.StockManager) map[string]time.Duration {
	return StallWith(t, pkg, false, newManager)
}

// StallWith is [Stall], with unkeyed calls among the calls when unkeyed is
// set (every fourth Reduce; a strategy's unkeyed batches may take another
// path, such as one round trip with the movement ledger). An unkeyed call
// that failed cannot be retried safely, so each may or may not have taken
// effect: initial - final must then equal taken - returned plus between
// none and all of their units.
func StallWith(t *testing.T, pkg string, unkeyed bool, newManager func(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) inventory.StockManager) map[string]time.Duration {
	worst := map[string]time.Duration{}
	for _, srv := range Servers {
		t.Run(srv.Name, func(t *testing.T) {
			px := netfault.NewProxy(t, srv.Addr(t))
			p := srv.Open(t, px.Addr())
			m := newManager(t, p.DB, sqltest.Schema(t, p.Admin))
			ctx := context.Background()
			sku := testenv.Prefix()
			const initial, calls = 1000, 12
			require.NoError(t, m.Init(ctx, sku, initial))
			// Open some connections first: some calls stall on one of them,
			// the others on a new connection.
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() { _, _ = m.Get(ctx, sku) })
			}
			wg.Wait()

			isUnkeyed := func(i int) bool { return unkeyed && i%4 == 1 }
			move := func(ctx context.Context, i int) error {
				opts := []inventory.Option{inventory.WithKey(fmt.Sprint("stall-", i))}
				if isUnkeyed(i) {
					opts = nil
				}
				var err error
				if i%4 == 3 {
					_, err = m.Return(ctx, sku, 1, opts...)
				} else {
					_, err = m.Reduce(ctx, sku, 2, opts...)
				}
				return err
			}
			px.Blackhole()
			var mu sync.Mutex
			var most time.Duration
			check := func(what string, d time.Duration, call func(context.Context) error) {
				late, err := faulttest.CheckLate(t, what, d, call)
				mu.Lock()
				most = max(most, late)
				mu.Unlock()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("%s: %v, want an error wrapping context.DeadlineExceeded", what, err)
				} else if !strings.HasPrefix(err.Error(), pkg+": ") {
					t.Errorf("%s: error not wrapped by %s: %v", what, pkg, err)
				}
			}
			for i := range calls {
				time.Sleep(stallGap)
				wg.Go(func() {
					d := StallDeadlines[i%len(StallDeadlines)]
					check(fmt.Sprintf("call %d (%v)", i, d), d, func(ctx context.Context) error { return move(ctx, i) })
				})
			}
			wg.Go(func() {
				check("get", StallDeadlines[0], func(ctx context.Context) error { _, err := m.Get(ctx, sku); return err })
			})
			wg.Wait()
			px.Clear()
			px.Reconnect()

			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			var taken, returned, maybe int64
			for i := range calls {
				if isUnkeyed(i) {
					maybe += 2 // its outcome is unknown: not retried
					continue
				}
				for {
					err := move(rctx, i)
					if err == nil || errors.Is(err, inventory.ErrDuplicate) {
						break
					}
					require.ErrorIs(t, err, inventory.ErrContention, "retry of call %d", i) // anything else is a bug
				}
				if i%4 == 3 {
					returned++
				} else {
					taken += 2
				}
			}
			final, err := m.Get(rctx, sku)
			require.NoError(t, err)
			if d := initial - final - (taken - returned); d < 0 || d > maybe {
				t.Errorf("initial %d - final %d != taken %d - returned %d plus 0..%d units of unkeyed calls", initial, final, taken, returned, maybe)
			}
			t.Logf("worst lateness past the deadline while stalled: %v", most.Round(time.Millisecond))
			worst[srv.Name] = most
		})
	}
	return worst
}
