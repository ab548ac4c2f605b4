package redlock_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redlock"
)

func TestMain(m *testing.M) {
	testenv.SkipExamplesWithout("^Example$", testenv.RedlockServers, testenv.RedisServer)
	redis.SetLogger(quiet{}) // the dead nodes of some tests are no news
	// go-redis probes a node it cannot dial in the background, once a
	// second, until the client is closed. faulttest's variant also ignores
	// a goroutine toxiproxy can leave behind.
	faulttest.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// TestExamples reports the Examples that TestMain left out for want of
// their servers (skipped, or failed when CI=true).
func TestExamples(t *testing.T) { testenv.ExamplesRan(t) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// nodes returns clients of the independent Redlock servers.
func nodes(t testing.TB) []redis.UniversalClient {
	var cs []redis.UniversalClient
	for _, c := range testenv.RedlockClients(t) {
		cs = append(cs, c)
	}
	return cs
}

// deadNode returns a client of an address where nothing listens,
// configured as the package documentation advises: no retries of its own.
func deadNode(t testing.TB) redis.UniversalClient {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	return c
}

// lockPrefix returns a lock-key prefix unique to t, whose keys are deleted
// from every node of clients when t ends.
func lockPrefix(t testing.TB, clients []redis.UniversalClient) string {
	p := testenv.RedisPrefix(t, clients[0]) + ":"
	for _, c := range clients[1:] {
		t.Cleanup(func() { testenv.DeleteKeys(t, c, p+"*") })
	}
	return p
}

// prefix is the option of a lockPrefix.
func prefix(t testing.TB, clients []redis.UniversalClient) redlock.Option {
	return redlock.WithPrefix(lockPrefix(t, clients))
}

func TestConformance(t *testing.T) {
	for _, st := range storetest.Stores {
		t.Run(st.Name, func(t *testing.T) {
			store := st.Open(t)
			clients := nodes(t)
			inventorytest.Run(t, inventorytest.Config{
				NewManager: func(t *testing.T) inventory.StockManager {
					m, err := redlock.New(clients, store, prefix(t, clients))
					require.NoError(t, err)
					return m
				},
				RequireOrders: true,
			})
		})
	}
}

// TestOneNodeDown runs the suite with the third node's address dead: the
// quorum of two is still there.
func TestOneNodeDown(t *testing.T) {
	store := storetest.Stores[0].Open(t)
	clients := append(nodes(t)[:2], deadNode(t))
	inventorytest.Run(t, inventorytest.Config{NewManager: func(t *testing.T) inventory.StockManager {
		m, err := redlock.New(clients, store, prefix(t, clients[:2]))
		require.NoError(t, err)
		return m
	}})
}

func TestNewRefuses(t *testing.T) {
	store := storetest.Stores[0].Open(t)
	clients := nodes(t)
	for name, c := range map[string]struct {
		clients []redis.UniversalClient
		store   redlock.Store
		opts    []redlock.Option
	}{
		"two nodes":      {clients: clients[:2], store: store},
		"nil node":       {clients: []redis.UniversalClient{clients[0], nil, clients[2]}, store: store},
		"nil store":      {clients: clients},
		"empty prefix":   {clients: clients, store: store, opts: []redlock.Option{redlock.WithPrefix("")}},
		"control prefix": {clients: clients, store: store, opts: []redlock.Option{redlock.WithPrefix("a\nb")}},
		"tiny expiry":    {clients: clients, store: store, opts: []redlock.Option{redlock.WithExpiry(time.Millisecond)}},
		"zero timeout":   {clients: clients, store: store, opts: []redlock.Option{redlock.WithAcquireTimeout(0)}},
		"inverted delay": {clients: clients, store: store, opts: []redlock.Option{redlock.WithRetryDelay(time.Second, time.Millisecond)}},
		"zero delay":     {clients: clients, store: store, opts: []redlock.Option{redlock.WithRetryDelay(0, time.Millisecond)}},
		"zero attempts":  {clients: clients, store: store, opts: []redlock.Option{redlock.WithMaxAttempts(0)}},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := redlock.New(c.clients, c.store, c.opts...)
			require.ErrorIs(t, err, inventory.ErrInvalidArgument)
			require.Nil(t, m)
		})
	}
}

func locker(t *testing.T, clients []redis.UniversalClient, opts ...redlock.Option) lockmgr.Locker {
	l, err := redlock.NewLocker(clients, opts...)
	require.NoError(t, err)
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// held takes the lock on "sku" with a Locker of the nodes made with opts
// under a prefix of t's, and returns a ctx that ends after a minute, that
// prefix, and the lease.
func held(t *testing.T, opts ...redlock.Option) (context.Context, redlock.Option, lockmgr.Lease) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	p := prefix(t, nodes(t))
	lease, err := locker(t, nodes(t), append([]redlock.Option{p}, opts...)...).Acquire(ctx, "sku")
	require.NoError(t, err)
	return ctx, p, lease
}

// requireContention checks that a Locker of the nodes under p that tries
// for timeout does not get the lock on "sku", and returns it.
func requireContention(ctx context.Context, t *testing.T, p redlock.Option, timeout time.Duration, msg string) lockmgr.Locker {
	t.Helper()
	waiter := locker(t, nodes(t), p, redlock.WithAcquireTimeout(timeout))
	_, err := waiter.Acquire(ctx, "sku")
	require.ErrorIs(t, err, inventory.ErrContention, msg)
	return waiter
}

func TestAcquireTimeout(t *testing.T) {
	ctx, p, lease := held(t)
	defer lease.Release(ctx)

	start := time.Now()
	waiter := requireContention(ctx, t, p, 200*time.Millisecond, "the acquire timeout")
	require.Less(t, time.Since(start), 5*time.Second)
	// Another name is free.
	other, err := waiter.Acquire(ctx, "sku2")
	require.NoError(t, err)
	require.NoError(t, other.Release(ctx))
}

func TestAcquireCancel(t *testing.T) {
	ctx, p, lease := held(t)

	waiter := locker(t, nodes(t), p)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err := waiter.Acquire(cctx, "sku")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, inventory.ErrContention)

	// Once released, the waiter gets it at once.
	require.NoError(t, lease.Release(ctx))
	again, err := waiter.Acquire(ctx, "sku")
	require.NoError(t, err)
	require.NoError(t, again.Release(ctx))
}

// TestExtends holds a lock past several expiries.
func TestExtends(t *testing.T) {
	ctx, p, lease := held(t, redlock.WithExpiry(150*time.Millisecond))
	time.Sleep(600 * time.Millisecond)
	select {
	case <-lease.Lost():
		t.Fatal("lease lost although every extension could succeed")
	default:
	}
	requireContention(ctx, t, p, 100*time.Millisecond, "the extended lock is still held")
	require.NoError(t, lease.Release(ctx))
}

// expiring takes the lock on "sku" of a 300ms expiry with a Locker of the
// nodes under a prefix of t's, and returns a ctx that ends after a minute,
// the nodes, the prefix and the lease.
func expiring(t *testing.T) (context.Context, []redis.UniversalClient, string, lockmgr.Lease) {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	clients := nodes(t)
	pfx := lockPrefix(t, clients)
	l := locker(t, clients, redlock.WithPrefix(pfx), redlock.WithExpiry(300*time.Millisecond))
	lease, err := l.Acquire(ctx, "sku")
	require.NoError(t, err)
	return ctx, clients, pfx, lease
}

// TestLostWhenExtensionFails lets the lock be taken over on a majority of
// nodes: the next extension fails and the lease reports itself lost.
func TestLostWhenExtensionFails(t *testing.T) {
	ctx, clients, pfx, lease := expiring(t)
	for _, c := range clients[:2] {
		require.NoError(t, c.Set(ctx, pfx+"sku", "someone else", time.Minute).Err())
		t.Cleanup(func() { c.Del(context.Background(), pfx+"sku") })
	}
	select {
	case <-lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost although a majority of nodes has another holder")
	}
	require.Error(t, lease.Release(ctx), "releasing a lost lock reports it")
}

// TestNodesDown: with no node reachable, Acquire reports the nodes' error,
// not contention.
func TestNodesDown(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	dead := []redis.UniversalClient{deadNode(t), deadNode(t), deadNode(t)}
	l := locker(t, dead, redlock.WithAcquireTimeout(300*time.Millisecond))
	_, err := l.Acquire(ctx, "sku")
	require.Error(t, err)
	require.NotErrorIs(t, err, inventory.ErrContention)
	var nodeErr *redsync.RedisError
	require.True(t, errors.As(err, &nodeErr), "the nodes' errors are kept: %v", err)
}

// TestExtensionRestoresNode: a node that lost the lock (as after a restart
// without persistence) gets it back with the next extension, and Release
// deletes it there too. The expiry is long (9s, an extension every 3s), so
// that no node's key expires before the release reaches it: the unlock
// script must find the token and delete it on every node. Release returns
// once a majority answered (documented), so the test waits for each node's
// unlock to come back, seen through a hook on the node clients, before it
// looks at the nodes.
func TestExtensionRestoresNode(t *testing.T) {
	ctx := ctxFor(t, time.Minute) // a bound for a broken run only
	clients := nodes(t)
	pfx := lockPrefix(t, clients)
	key := pfx + "sku"
	unlocks := make([]chan int64, len(clients))
	for i, c := range clients {
		unlocks[i] = make(chan int64, 4)
		c.AddHook(unlockHook{key: key, results: unlocks[i]})
	}
	l := locker(t, clients, redlock.WithPrefix(pfx), redlock.WithExpiry(9*time.Second))
	lease, err := l.Acquire(ctx, "sku")
	require.NoError(t, err)
	token, err := clients[0].Get(ctx, key).Result()
	require.NoError(t, err)
	require.NoError(t, clients[2].Del(ctx, key).Err())
	for {
		got, err := clients[2].Get(ctx, key).Result()
		if got == token {
			break
		}
		require.ErrorIs(t, err, redis.Nil, "the extension sets the lock again where it was missing")
		select {
		case <-ctx.Done():
			t.Fatalf("the extension did not set the lock again where it was missing: %v", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	require.NoError(t, lease.Release(ctx))
	for i, c := range clients {
		select {
		case n := <-unlocks[i]:
			require.EqualValues(t, 1, n, "node %d: the unlock found the token and deleted the lock", i)
		case <-ctx.Done():
			t.Fatalf("node %d: no unlock came back: %v", i, ctx.Err())
		}
		require.Zero(t, c.Exists(ctx, key).Val(), "node %d: released", i)
	}
}

// unlockHook sends to results the reply of every unlock of key that a node
// client completes: redsync's delete script (EVAL or EVALSHA with the key
// and one argument, the token; its extend scripts take two).
type unlockHook struct {
	key     string
	results chan<- int64
}

func (h unlockHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h unlockHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h unlockHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		args := cmd.Args()
		if (cmd.Name() == "eval" || cmd.Name() == "evalsha") && len(args) == 5 && args[3] == h.key && err == nil {
			n, _ := cmd.(*redis.Cmd).Int64()
			h.results <- n
		}
		return err
	}
}
