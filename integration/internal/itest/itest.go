// Package itest holds what the fault, stall and retry tests of several
// packages share: contexts, Redis clients, the Stores the lock strategies'
// fault tests run on, and an audit of every call's outcome under faults.
package itest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/integration/internal/netfault"
	"github.com/stockkit/inventory/internal/faulttest"
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

func (a *Audit) record(ctx context.Context, dir driver.Direction, opts []inventory.Option, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if dl, ok := ctx.Deadline(); ok {
		a.overrun = max(a.overrun, time.Since(dl))
	}
	k := string(dir) + "/" + driver.Apply(opts).Key
	a.calls[k] = append(a.calls[k], err)
}

// Reduce implements inventory.StockManager, recording the outcome.
func (a *Audit) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := a.StockManager.Reduce(ctx, sku, qty, opts...)
	if err == nil && a.Faulted.Load() {
		a.During.Add(1)
	}
	a.record(ctx, driver.DirReduce, opts, err)
	return rem, err
}

// Return implements inventory.StockManager, recording the outcome.
func (a *Audit) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := a.StockManager.Return(ctx, sku, qty, opts...)
	a.record(ctx, driver.DirReturn, opts, err)
	return rem, err
}

// Sells keeps a fault on until n more units were sold, or a minute passed
// (a bound for a broken run only; a shorter one would assume how fast a
// loaded machine sells past the fault).
func (a *Audit) Sells(n int64) {
	a.Faulted.Store(true)
	defer a.Faulted.Store(false)
	want := a.During.Load() + n
	for deadline := time.Now().Add(time.Minute); a.During.Load() < want && time.Now().Before(deadline); {
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

// pausingStore stalls the write of the call with its key once: after the
// Manager's checks, right before its compare-and-set, it runs pause, as if
// the holder had stalled there (a GC pause, a stalled network). It then
// writes, and sends whether that late write went through on late.
type pausingStore struct {
	lockmgr.Store
	key   string
	pause func()
	once  sync.Once
	late  chan bool
}

func (s *pausingStore) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	paused := false
	if key == s.key {
		s.once.Do(func() { s.pause(); paused = true })
	}
	ok, err := s.Store.CompareAndSet(ctx, sku, version, newStock, dir, key)
	if paused {
		s.late <- ok && err == nil
	}
	return ok, err
}

// PausedHolder stalls a holder between its checks and its write until its
// lock has lapsed and another Manager has sold the rest: the stalled
// holder's late write must fail its compare-and-set, and its call, tried
// again under the lock, must find the stock sold out. stalled makes the
// stalling Manager over the Store it is given (store, wrapped); other sells
// from store directly. cut, run as the holder stalls, makes its lock lapse
// (cuts its Manager off from the lock service); restore, run when the rest
// is sold, undoes that and reports whether it could.
func PausedHolder(t *testing.T, ctx context.Context, store lockmgr.Store, sku string,
	stalled func(lockmgr.Store) inventory.StockManager, other inventory.StockManager, cut func(), restore func() error) {
	t.Helper()
	const stock = 5
	paused, resume := make(chan struct{}), make(chan struct{})
	var restoreErr error
	ps := &pausingStore{Store: store, key: "stalled", late: make(chan bool, 1), pause: func() {
		cut()
		close(paused)
		<-resume
		restoreErr = restore()
	}}
	m := stalled(ps)
	require.NoError(t, other.Init(ctx, sku, stock))
	type outcome struct {
		rem int64
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		rem, err := m.Reduce(ctx, sku, 1, inventory.WithKey("stalled"))
		done <- outcome{rem, err}
	}()
	<-paused
	start := time.Now()
	for range stock {
		_, err := other.Reduce(ctx, sku, 1)
		require.NoError(t, err)
	}
	_, err := other.Reduce(ctx, sku, 1)
	require.ErrorIs(t, err, inventory.ErrInsufficientStock)
	t.Logf("the other Manager sold all %d units %v into the stall", stock, time.Since(start).Round(time.Millisecond))
	close(resume)

	require.False(t, <-ps.late, "the stalled holder's late write must fail its compare-and-set")
	require.NoError(t, restoreErr)
	out := <-done
	require.ErrorIs(t, out.err, inventory.ErrInsufficientStock, "tried again under the lock, the call finds nothing left")
	require.Zero(t, out.rem)
	n, err := other.Get(ctx, sku)
	require.NoError(t, err)
	require.Zero(t, n, "sold exactly the stock, once")
}

// RedisFault is a fault of the network between a client and its Redis.
type RedisFault struct {
	Name  string
	Fault func(p *netfault.Proxy)
	// Unknown: the struck write reached Redis and its answer was lost, so
	// some calls must fail after Redis applied them: the case only the
	// idempotency key makes safe to retry.
	Unknown bool
}

// RedisFaults are the faults of the Redis strategies' network fault tests;
// latency is the latency added, past the calls' timeout.
func RedisFaults(latency time.Duration) []RedisFault {
	return []RedisFault{
		{"latency past the timeout", func(p *netfault.Proxy) { p.Latency(latency) }, true},
		{"blackhole", func(p *netfault.Proxy) { p.Blackhole() }, true},
		{"connection reset", func(p *netfault.Proxy) { p.ResetPeer(5 * time.Millisecond) }, false},
		{"cut mid-reply", func(p *netfault.Proxy) { p.CutAfterBytes(3) }, true},
	}
}

// StallSale sells from a while a server is stopped for 2.5s: pause stops
// it, resume starts it again. Every call from 20ms before the stall (long
// enough for the calls in flight to be ones that started checked, short
// enough that the sale is not over first) to 300ms after it runs with a 1s
// deadline and must return within inventory.DeadlineSlack of it, though the
// server answers nothing ([faulttest.Deadlined]); outside, calls have 2s. a.Faulted is on during
// the stall. After it the sale's keyed retries settle every failed call and
// the invariant must hold exactly; StallSale then requires that calls ran
// during the stall, that none was refused as sold out, and a.Check.
func StallSale(t *testing.T, a *Audit, buyers, workers int, pause, resume func()) faulttest.Result {
	t.Helper()
	d := &faulttest.Deadlined{StockManager: a, T: t, D: time.Second}
	sale := faulttest.Sale{Manager: d, SKU: "shoe", Stock: 400, Buyers: buyers, Refund: 7, Workers: workers,
		CallTimeout: 2 * time.Second} // outside the stall; in it, Deadlined sets 1s
	start := time.Now()
	res := sale.Run(t, func() {
		t.Logf("stall %v into the sale", time.Since(start).Round(time.Millisecond))
		d.Stalled.Store(true) // check the calls in flight as the stall strikes, too
		time.Sleep(20 * time.Millisecond)
		pause()
		a.Faulted.Store(true)
		time.Sleep(2500 * time.Millisecond)
		a.Faulted.Store(false)
		resume()
		time.Sleep(300 * time.Millisecond)
		d.Stalled.Store(false)
	}, func() {
		t.Logf("every first attempt ended %v into the sale", time.Since(start).Round(time.Millisecond))
	})
	t.Log(d)
	t.Logf("%d units sold during the stall", a.During.Load())
	checked, _ := d.Report()
	require.Positive(t, checked, "calls ran during the stall")
	require.Zero(t, res.Insufficient, "a stall never reads as sold out")
	a.Check(t)
	return res
}

// BackendCause reports whether err wraps a context error or the network's
// or Redis's error: the causes an [Audit] accepts from any strategy (add a
// lock service's own).
func BackendCause(err error) bool {
	var ne net.Error
	var re redis.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.As(err, &ne) || errors.As(err, &re)
}
