package lockmgr_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/lockmgr/lockmgrtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type store struct {
	name string
	new  func(t *testing.T) lockmgr.Store // a fresh Store for t
}

// stores are the Stores the tests run over: in memory, Redis, then the SQL
// engines.
var stores = []store{
	{"memory", func(*testing.T) lockmgr.Store { return lockmgrtest.NewMemoryStore(0) }},
	{"redis", func(t *testing.T) lockmgr.Store { return storetest.Redis(t, testenv.Redis(t)) }},
}

func init() {
	for _, e := range sqltest.Engines {
		stores = append(stores, store{e.Name, func(t *testing.T) lockmgr.Store {
			return storetest.SQL(t, e.Open(t))
		}})
	}
}

// TestConformance runs the suite with an in-process lock over the memory
// and Redis stores; redislock, redlock and zklock run it over every store
// with their real locks.
func TestConformance(t *testing.T) {
	for _, st := range stores[:2] {
		t.Run(st.name, func(t *testing.T) {
			inventorytest.Run(t, inventorytest.Config{
				NewManager: func(t *testing.T) inventory.StockManager {
					return lockmgr.MustNew(newFakeLocker(0), st.new(t))
				},
				RequireOrders: true,
			})
		})
	}
}

// TestPausedHolder pauses a holder between its checks and its write until
// its lock has lapsed and another buyer has taken the last unit. The
// compare-and-set turns the paused write into a retry that finds the stock
// gone; a store that writes unconditionally sells the unit twice.
func TestPausedHolder(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			sold, final, errA := pausedHolder(t, st.new(t))
			require.ErrorIs(t, errA, inventory.ErrInsufficientStock, "the paused holder retries and finds the stock gone")
			require.Equal(t, 1, sold)
			require.EqualValues(t, 0, final)
		})
		t.Run(st.name+" without CAS", func(t *testing.T) {
			sold, final, errA := pausedHolder(t, blindStore{st.new(t)})
			require.NoError(t, errA)
			require.Equal(t, 2, sold, "an unconditional write sells the last unit twice")
			require.EqualValues(t, 0, final, "and the stock says nothing is wrong")
		})
	}
}

// pausedHolder sells one unit to two buyers, A paused past its lock TTL
// while B buys, and returns how many buyers were told they bought, the
// final stock, and A's error.
func pausedHolder(t *testing.T, s lockmgr.Store) (sold int, final int64, errA error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	locker := newFakeLocker(50 * time.Millisecond)
	m := lockmgr.MustNew(locker, s)
	const sku = "last-unit"
	require.NoError(t, m.Init(ctx, sku, 1))

	var paused atomic.Bool
	var errB error
	lockmgr.SetBeforeWrite(m, func(string) {
		if paused.Swap(true) {
			return // only A pauses
		}
		// A is paused here, having read 1. B blocks until A's lock
		// lapses, then buys the unit.
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, errB = m.Reduce(ctx, sku, 1, inventory.WithKey("buyer-b"))
		}()
		<-done
	})
	_, errA = m.Reduce(ctx, sku, 1, inventory.WithKey("buyer-a"))
	require.NoError(t, errB, "B bought the unit while A was paused")
	sold = 1
	if errA == nil {
		sold++
	}
	final, err := m.Get(ctx, sku)
	require.NoError(t, err)
	require.Equal(t, locker.acquired.Load(), locker.released.Load(), "every lease released")
	return sold, final, errA
}

// lostLocker hands out leases that are already lost.
type lostLocker struct{ *fakeLocker }

func (l lostLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	le, err := l.fakeLocker.Acquire(ctx, name)
	if err == nil {
		close(le.(*fakeLease).lost)
	}
	return le, err
}

func TestLostLeaseWritesNothing(t *testing.T) {
	ctx := context.Background()
	s := newMemStore()
	l := lostLocker{newFakeLocker(0)}
	m := lockmgr.MustNew(l, s)
	require.NoError(t, m.Init(ctx, "shoe", 5))
	_, err := m.Reduce(ctx, "shoe", 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrContention)
	n, err := m.Get(ctx, "shoe")
	require.NoError(t, err)
	require.EqualValues(t, 5, n)
	_, found, err := s.Seen(ctx, "shoe", driver.DirReduce, "k")
	require.NoError(t, err)
	require.False(t, found, "the key is not used up")
	require.Equal(t, l.acquired.Load(), l.released.Load())
}

// movingStore's stock always moves between Read and CompareAndSet.
type movingStore struct{ *memStore }

func (movingStore) CompareAndSet(context.Context, string, int64, int64, driver.Direction, string) (bool, error) {
	return false, nil
}

func TestMaxAttempts(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ opt, want int }{{1, 1}, {5, 5}} {
		l := newFakeLocker(0)
		m := lockmgr.MustNew(l, movingStore{newMemStore()}, lockmgr.WithMaxAttempts(tc.opt))
		require.NoError(t, m.Init(ctx, "shoe", 5))
		_, err := m.Return(ctx, "shoe", 1)
		require.ErrorIs(t, err, inventory.ErrContention)
		require.EqualValues(t, tc.want, l.acquired.Load(), "WithMaxAttempts(%d)", tc.opt)
		require.EqualValues(t, tc.want, l.released.Load())
	}
	l := newFakeLocker(0)
	m := lockmgr.MustNew(l, movingStore{newMemStore()})
	require.NoError(t, m.Init(ctx, "shoe", 5))
	_, err := m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, inventory.ErrContention)
	require.EqualValues(t, lockmgr.DefaultMaxAttempts, l.acquired.Load())
}

// dupStore reports a duplicate from CompareAndSet, as when another holder
// recorded the key while this one's lock had lapsed.
type dupStore struct {
	*memStore
	seen atomic.Int64
}

func (d *dupStore) Seen(ctx context.Context, sku string, dir driver.Direction, key string) (int64, bool, error) {
	if d.seen.Add(1) == 1 {
		return 0, false, nil // before the write
	}
	return 42, true, nil
}

func (d *dupStore) CompareAndSet(context.Context, string, int64, int64, driver.Direction, string) (bool, error) {
	return false, inventory.ErrDuplicate
}

func TestDuplicateAtWrite(t *testing.T) {
	ctx := context.Background()
	m := lockmgr.MustNew(newFakeLocker(0), &dupStore{memStore: newMemStore()})
	require.NoError(t, m.Init(ctx, "shoe", 5))
	rem, err := m.Reduce(ctx, "shoe", 1, inventory.WithKey("k"))
	require.ErrorIs(t, err, inventory.ErrDuplicate)
	require.EqualValues(t, 42, rem, "the first call's remaining")
}

// failStore fails every Read with a backend error.
type failStore struct{ *memStore }

var errBackend = errors.New("backend down")

func (failStore) Read(context.Context, string) (int64, int64, error) { return 0, 0, errBackend }

func TestBackendErrorsPassThrough(t *testing.T) {
	ctx := context.Background()
	l := newFakeLocker(0)
	m := lockmgr.MustNew(l, failStore{newMemStore()})
	_, err := m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, errBackend)
	require.NotErrorIs(t, err, inventory.ErrInsufficientStock)
	require.Equal(t, l.acquired.Load(), l.released.Load())
}

// ctxLocker records whether Release got a live context.
type ctxLocker struct {
	*fakeLocker
	releaseCtxErr chan error
}

type ctxLease struct {
	lockmgr.Lease
	errs chan error
}

func (l ctxLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	le, err := l.fakeLocker.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	return ctxLease{le, l.releaseCtxErr}, nil
}

func (le ctxLease) Release(ctx context.Context) error {
	le.errs <- ctx.Err()
	return le.Lease.Release(ctx)
}

func TestReleaseOutlivesCancel(t *testing.T) {
	l := ctxLocker{newFakeLocker(0), make(chan error, 1)}
	m := lockmgr.MustNew(l, newMemStore())
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, m.Init(ctx, "shoe", 5))
	lockmgr.SetBeforeWrite(m, func(string) { cancel() })
	_, err := m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, <-l.releaseCtxErr, "the lock is released even once ctx is cancelled")
}

func TestAcquireErrors(t *testing.T) {
	l := newFakeLocker(0)
	m := lockmgr.MustNew(l, newMemStore())
	require.NoError(t, m.Init(context.Background(), "shoe", 5))
	held, err := l.Acquire(context.Background(), "shoe")
	require.NoError(t, err)
	defer held.Release(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err = m.Reduce(ctx, "shoe", 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
