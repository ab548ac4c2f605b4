package redislock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
)

// newLocker returns a Locker under a prefix unique to t.
func newLocker(t *testing.T, c redis.UniversalClient, prefix string, opts ...redislock.Option) lockmgr.Locker {
	t.Helper()
	l, err := redislock.NewLocker(c, append([]redislock.Option{redislock.WithPrefix(prefix)}, opts...)...)
	require.NoError(t, err)
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// standalone returns the standalone Redis, a lock prefix unique to t and
// a ctx that ends after 20s.
func standalone(t *testing.T) (*redis.Client, string, context.Context) {
	c := testenv.Redis(t)
	return c, lockPrefix(t, c), ctxFor(t, 20*time.Second)
}

// acquire takes the lock on name with l; an error fails t.
func acquire(ctx context.Context, t *testing.T, l lockmgr.Locker, name string) lockmgr.Lease {
	t.Helper()
	le, err := l.Acquire(ctx, name)
	require.NoError(t, err)
	return le
}

// requireRenewed checks that a lock is renewed: take(sku, ttl) returns
// the lease of a lock on sku with a TTL of ttl, which must then be held for
// five TTLs (a Locker that tries for 5*ttl meanwhile does not get it) with
// its Lost open. A loaded machine may renew it late: when the other
// Locker got it, its holder must have been told (Lost closes), and the
// check runs again on a fresh SKU with 4 times the TTL, from 60ms up to
// 960ms, where a lapse fails; so it does when a renewal too late to be
// sure closed Lost, or take returns nil (a lock it needed lapsed first).
// Last it releases the lock (a lapse just before fails at 960ms too) and
// returns the other Locker and the SKU.
func requireRenewed(ctx context.Context, t *testing.T, c redis.UniversalClient, prefix string, take func(sku string, ttl time.Duration) lockmgr.Lease) (lockmgr.Locker, string) {
	t.Helper()
	for ttl := 60 * time.Millisecond; ; ttl *= 4 {
		sku := fmt.Sprint("shoe-", ttl.Milliseconds())
		held := take(sku, ttl)
		if held == nil && ttl < 960*time.Millisecond {
			t.Logf("a lock of a %v TTL lapsed before its release (a loaded machine): again with %v", ttl, 4*ttl)
			continue
		}
		require.NotNil(t, held, "a lock of a %v TTL lapsed before its release", ttl)
		other := newLocker(t, c, prefix, redislock.WithAcquireTimeout(5*ttl))
		le, err := other.Acquire(ctx, sku)
		if late := err == nil || closed(held.Lost()); late && ttl < 960*time.Millisecond {
			if err == nil {
				select {
				case <-held.Lost():
				case <-time.After(5*ttl + time.Second):
					t.Fatal("the lock lapsed and its holder was not told")
				}
				require.NoError(t, le.Release(ctx))
			} else {
				require.ErrorIs(t, err, inventory.ErrContention)
			}
			// Its renewal gave up (Lost): the lock may have lapsed. Release
			// stops the lease all the same (a waiter's lets go of its
			// Locker's subscription).
			if err := held.Release(ctx); err != nil {
				require.ErrorContains(t, err, "the lock had lapsed")
			}
			t.Logf("the renewal of a %v TTL came late (a loaded machine): again with %v", ttl, 4*ttl)
			continue
		}
		require.ErrorIs(t, err, inventory.ErrContention, "still held after five TTLs")
		require.False(t, closed(held.Lost()), "lost a renewed lock")
		err = held.Release(ctx)
		if err != nil && ttl < 960*time.Millisecond {
			require.ErrorContains(t, err, "the lock had lapsed")
			t.Logf("the renewal of a %v TTL came late (a loaded machine) after the check: again with %v", ttl, 4*ttl)
			continue
		}
		require.NoError(t, err, "released")
		return other, sku
	}
}

// acquireAsync starts an Acquire and returns where its outcome arrives.
func acquireAsync(ctx context.Context, l lockmgr.Locker, name string) <-chan lockmgr.Lease {
	got := make(chan lockmgr.Lease, 1)
	go func() {
		le, err := l.Acquire(ctx, name)
		if err != nil {
			le = nil
		}
		got <- le
	}()
	return got
}

// TestReleaseWakesWaiter has a second process wait for a held lock with a
// TTL and a safety-net wait of a minute: only the hand-over can wake it
// within the test's deadline.
func TestReleaseWakesWaiter(t *testing.T) {
	servers := map[string]func(testing.TB) redis.UniversalClient{
		"redis":   func(t testing.TB) redis.UniversalClient { return testenv.Redis(t) },
		"cluster": func(t testing.TB) redis.UniversalClient { return testenv.RedisCluster(t) },
	}
	for name, open := range servers {
		t.Run(name, func(t *testing.T) {
			ctx := ctxFor(t, 20*time.Second)
			c := open(t)
			prefix := lockPrefix(t, c)
			opts := []redislock.Option{redislock.WithTTL(time.Minute), redislock.WithMaxWait(time.Minute)}
			p1, p2 := newLocker(t, c, prefix, opts...), newLocker(t, c, prefix, opts...)
			const sku = "{hot} shoe"
			held, err := p1.Acquire(ctx, sku)
			require.NoError(t, err)
			got := acquireAsync(ctx, p2, sku)
			// Wait until p2 queues for the lock.
			require.Eventually(t, func() bool {
				n, err := c.ZCard(ctx, redislock.QueueKey(prefix, sku)).Result()
				return err == nil && n > 0
			}, 10*time.Second, 5*time.Millisecond)
			select {
			case <-got:
				t.Fatal("acquired a held lock")
			default:
			}
			require.NoError(t, held.Release(ctx))
			le := <-got
			require.NotNil(t, le, "the waiter took the lock once it was released")
			require.NoError(t, le.Release(ctx))
		})
	}
}

func TestAcquireGivesUp(t *testing.T) {
	c, prefix, ctx := standalone(t)
	held := acquire(ctx, t, newLocker(t, c, prefix), "shoe")
	defer held.Release(ctx)

	// Another process waits in Redis.
	_, err := newLocker(t, c, prefix, redislock.WithAcquireTimeout(50*time.Millisecond)).Acquire(ctx, "shoe")
	require.ErrorIs(t, err, inventory.ErrContention, "the acquire timeout")
	require.NotErrorIs(t, err, context.DeadlineExceeded)

	l := newLocker(t, c, prefix, redislock.WithAcquireTimeout(time.Hour))
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = l.Acquire(short, "shoe")
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "the caller's deadline")
	require.NotErrorIs(t, err, inventory.ErrContention)

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = l.Acquire(cctx, "shoe")
	require.ErrorIs(t, err, context.Canceled, "the caller's cancel")
}

// TestInProcessQueue: a second goroutine of the same process waits behind
// the holder, and gives up with its ctx.
func TestInProcessQueue(t *testing.T) {
	c := testenv.Redis(t)
	ctx := ctxFor(t, 20*time.Second)
	l := newLocker(t, c, lockPrefix(t, c), redislock.WithAcquireTimeout(50*time.Millisecond))
	held, err := l.Acquire(ctx, "shoe")
	require.NoError(t, err)
	_, err = l.Acquire(ctx, "shoe")
	require.ErrorIs(t, err, inventory.ErrContention)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(20*time.Millisecond, cancel)
	_, err = l.Acquire(cctx, "shoe")
	require.ErrorIs(t, err, context.Canceled)
	other, err := l.Acquire(ctx, "boot")
	require.NoError(t, err, "other names are not queued")
	require.NoError(t, other.Release(ctx))
	require.NoError(t, held.Release(ctx))
	again, err := l.Acquire(ctx, "shoe")
	require.NoError(t, err)
	require.NoError(t, again.Release(ctx))
}

// TestRenewal holds a 60ms lock for much longer than that: renewal keeps
// it, and nobody else gets it meanwhile.
//
// A renewal every TTL/3 of a 60ms TTL can come late on a loaded machine
// (load 12 once let the lock lapse): then the holder must be told (Lost),
// and the check runs again with 4x the TTL, up to 960ms, where a lapse
// fails the test.
func TestRenewal(t *testing.T) {
	c, prefix, ctx := standalone(t)
	other, sku := requireRenewed(ctx, t, c, prefix, func(sku string, ttl time.Duration) lockmgr.Lease {
		return acquire(ctx, t, newLocker(t, c, prefix, redislock.WithTTL(ttl)), sku)
	})
	require.NoError(t, acquire(ctx, t, other, sku).Release(ctx))
}

// TestLost: when the lock is taken from its holder, renewal notices, Lost
// closes, and Release leaves the new holder's lock alone.
func TestLost(t *testing.T) {
	c, prefix, ctx := standalone(t)
	held := acquire(ctx, t, newLocker(t, c, prefix, redislock.WithTTL(60*time.Millisecond)), "shoe")
	key := redislock.LockKey(prefix, "shoe")
	require.NoError(t, c.Set(ctx, key, "thief", time.Minute).Err())
	select {
	case <-held.Lost():
	case <-ctx.Done():
		t.Fatal("Lost never closed")
	}
	require.Error(t, held.Release(ctx), "the lock had lapsed")
	v, err := c.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "thief", v, "the thief's lock is untouched")
}

// TestDeadHolder: a lock whose holder died (no release message) is taken
// once it expires.
func TestDeadHolder(t *testing.T) {
	c, prefix, ctx := standalone(t)
	require.NoError(t, c.Set(ctx, redislock.LockKey(prefix, "shoe"), "dead", 100*time.Millisecond).Err())
	le, err := newLocker(t, c, prefix, redislock.WithMaxWait(time.Minute)).Acquire(ctx, "shoe")
	require.NoError(t, err, "taken once the dead holder's TTL ran out")
	require.NoError(t, le.Release(ctx))
	n, err := c.Exists(ctx, redislock.LockKey(prefix, "shoe")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "released")
}

// TestOtherProcessesGetTurns: a process whose goroutines queue for a lock
// without pause still lets another process's waiter in.
func TestOtherProcessesGetTurns(t *testing.T) {
	c, prefix, ctx := standalone(t)
	busy := newLocker(t, c, prefix)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				le, err := busy.Acquire(ctx, "shoe")
				if err != nil {
					t.Error(err)
					return
				}
				_ = le.Release(ctx)
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	other := newLocker(t, c, prefix, redislock.WithMaxWait(time.Minute))
	for range 3 {
		le, err := other.Acquire(ctx, "shoe")
		require.NoError(t, err, "the other process got a turn")
		require.NoError(t, le.Release(ctx))
	}
}
