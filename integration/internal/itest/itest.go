// Package itest holds what the fault, stall and retry tests of several
// packages share: contexts, Redis clients, the Stores the lock strategies'
// fault tests run on, and an audit of every call's outcome under faults.
package itest

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/netfault"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// CtxFor returns a context that ends after d, or when t ends.
func CtxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// FaultClient is a go-redis client on addr as the packages' docs advise
// under faults: no retries of its own (the sale retries with keys), a short
// dial timeout, reads and writes bounded by rw and by each call's ctx. It is
// closed when t ends.
func FaultClient(t testing.TB, addr string, rw time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 32, MaxRetries: -1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: rw, WriteTimeout: rw,
		ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

// RetryingClient is a go-redis client through p on go-redis's default
// retries (MaxRetries 3) with one connection: each dial clears p's faults
// and counts itself in redials. It is closed when t ends.
func RetryingClient(t testing.TB, p *netfault.Proxy, redials *atomic.Int64) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), PoolSize: 1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			redials.Add(1)
			p.Clear()
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { c.Close() })
	return c
}

// Stores are the Stores the lock strategies' fault tests run on: Redis
// (6379, a prefix of the test's own) and MariaDB (tables of the test's own).
var Stores = []struct {
	Name string
	Open func(t *testing.T) lockmgr.Store
}{
	{"redis", func(t *testing.T) lockmgr.Store {
		c := testenv.Redis(t)
		s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)))
		require.NoError(t, err)
		return s
	}},
	{"mysql", func(t *testing.T) lockmgr.Store {
		db := testenv.MySQL(t)
		s, err := sqlstore.New(db, sqlstore.WithSchema(sqltest.Schema(t, db)))
		require.NoError(t, err)
		return s
	}},
}

// Audit records the outcome of every Reduce and Return, per direction and
// key, to check what the contract promises of errors under faults. Its
// zero value is not usable: make one with [NewAudit].
type Audit struct {
	inventory.StockManager

	// InsufficientAllowed says whether the stock may run out in the sale:
	// if not, ErrInsufficientStock fails the check.
	InsufficientAllowed bool

	// Faulted is true while a fault is on; During counts the Reduces that
	// took effect meanwhile.
	Faulted atomic.Bool
	During  atomic.Int64

	backend func(error) bool

	mu      sync.Mutex
	calls   map[string][]error
	overrun time.Duration // the longest a call ran past its deadline
}

// NewAudit audits m. backend reports whether an error carries a backend's
// cause (a context, network or server error): only such an error may leave
// a call's outcome unknown.
func NewAudit(m inventory.StockManager, backend func(error) bool) *Audit {
	return &Audit{StockManager: m, backend: backend, calls: map[string][]error{}}
}

func (a *Audit) record(ctx context.Context, dir inventory.Direction, opts []inventory.Option, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		a.overrun = max(a.overrun, time.Since(dl))
	}
	k := string(dir) + "/" + inventory.Apply(opts).Key
	a.calls[k] = append(a.calls[k], err)
}

// Reduce implements inventory.StockManager, recording the outcome.
func (a *Audit) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := a.StockManager.Reduce(ctx, sku, qty, opts...)
	if err == nil && a.Faulted.Load() {
		a.During.Add(1)
	}
	a.record(ctx, inventory.DirReduce, opts, err)
	return rem, err
}

// Return implements inventory.StockManager, recording the outcome.
func (a *Audit) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := a.StockManager.Return(ctx, sku, qty, opts...)
	a.record(ctx, inventory.DirReturn, opts, err)
	return rem, err
}

// Sells keeps a fault on until n more units were sold, or 10s passed.
func (a *Audit) Sells(n int64) {
	a.Faulted.Store(true)
	defer a.Faulted.Store(false)
	want := a.During.Load() + n
	for deadline := time.Now().Add(10 * time.Second); a.During.Load() < want && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// Check fails t unless every error carries its cause (ErrContention, or a
// backend's) and none claims a lost SKU or a bad argument, and unless every
// call later found to have taken effect (a retry said ErrDuplicate) had
// failed with an unknown outcome (a backend's error), not with an error
// that says nothing was taken.
func (a *Audit) Check(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	t.Logf("the longest a call ran past its deadline: %v", a.overrun)
	for k, errs := range a.calls {
		unknown := false
		for i, err := range errs {
			switch {
			case err == nil:
			case errors.Is(err, inventory.ErrDuplicate):
				require.Positive(t, i, "%s: first attempt said duplicate: %v", k, err)
				require.True(t, unknown, "%s: took effect, yet every failed attempt said nothing was taken: %v", k, errs)
			case errors.Is(err, inventory.ErrInsufficientStock):
				require.True(t, a.InsufficientAllowed, "%s: %v, though the stock never ran out", k, err)
			case errors.Is(err, inventory.ErrNotFound), errors.Is(err, inventory.ErrInvalidArgument):
				t.Fatalf("%s: %v", k, err)
			case errors.Is(err, inventory.ErrContention):
			default:
				require.True(t, a.backend(err), "%s: error without a backend cause: %v", k, err)
				unknown = true
			}
		}
	}
}
