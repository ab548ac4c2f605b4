package zklock_test

import (
	"context"
	"errors"
	"net"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/zklock"
)

func TestMain(m *testing.M) {
	testenv.SkipExamplesWithout("^Example$", testenv.ZooKeeperServer, testenv.MySQLServer)
	goleak.VerifyTestMain(m)
}

// TestExamples reports the Examples that TestMain left out for want of
// their servers (skipped, or failed when CI=true).
func TestExamples(t *testing.T) { testenv.ExamplesRan(t) }

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// link is a ZooKeeper session whose TCP connection a test can cut, and
// whose reconnection it can hold off.
type link struct {
	conn   *zk.Conn
	events <-chan zk.Event

	mu      sync.Mutex
	net     net.Conn
	blocked bool
}

// connect opens a session and waits until it is established.
func connect(t testing.TB) *link {
	t.Helper()
	l := &link{}
	dial := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.blocked {
			return nil, errors.New("test: dialing blocked")
		}
		c, err := net.DialTimeout(network, addr, timeout)
		l.net = c
		return c, err
	}
	addrs := testenv.ZooKeeperAddrs(t)
	conn, events, err := zk.Connect(addrs, 4*time.Second, zk.WithDialer(dial), zk.WithLogger(quiet{}))
	if err != nil {
		testenv.Missing(t, "ZooKeeper", err)
	}
	t.Cleanup(conn.Close)
	l.conn, l.events = conn, events
	deadline := time.After(5 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return l
			}
		case <-deadline:
			testenv.Missing(t, "ZooKeeper at "+strings.Join(addrs, ","), errors.New("no session within 5s"))
		}
	}
}

// cut closes the TCP connection; with block, reconnection fails until
// unblock.
func (l *link) cut(block bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blocked = block
	if l.net != nil {
		l.net.Close()
	}
}

func (l *link) unblock() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blocked = false
}

// root returns a lock root of its own for t, checked to be empty at the end.
var root = testenv.ZKRoot

func TestConformance(t *testing.T) {
	for _, st := range storetest.Stores {
		t.Run(st.Name, func(t *testing.T) {
			store := st.Open(t)
			l := connect(t)
			r := root(t, l.conn)
			// One Manager, and so one session watcher, per session.
			m, err := zklock.New(l.conn, store, zklock.WithRoot(r), zklock.WithSessionEvents(l.events))
			require.NoError(t, err)
			inventorytest.Run(t, inventorytest.Config{
				NewManager:    func(t *testing.T) inventory.StockManager { return m },
				RequireOrders: true,
			})
		})
	}
}

func TestNewRefuses(t *testing.T) {
	conn := testenv.ZooKeeper(t)
	store := storetest.Stores[0].Open(t)
	for name, c := range map[string]struct {
		conn  *zk.Conn
		store zklock.Store
		opts  []zklock.Option
	}{
		"nil conn":  {store: store},
		"nil store": {conn: conn},
		"no ACL":    {conn: conn, store: store, opts: []zklock.Option{zklock.WithACL()}},
		"timeout":   {conn: conn, store: store, opts: []zklock.Option{zklock.WithAcquireTimeout(0)}},
		"events":    {conn: conn, store: store, opts: []zklock.Option{zklock.WithSessionEvents(nil)}},
		"attempts":  {conn: conn, store: store, opts: []zklock.Option{zklock.WithMaxAttempts(0)}},
	} {
		t.Run(name, func(t *testing.T) {
			m, err := zklock.New(c.conn, c.store, c.opts...)
			require.ErrorIs(t, err, inventory.ErrInvalidArgument)
			require.Nil(t, m)
		})
	}
	for _, r := range []string{"", "/", "locks", "/locks/", "/a//b", "/a/./b", "/a/../b", "/zookeeper",
		"/zookeeper/locks", "/a\x00b", "/a\nb", "/a\uf000", "/bad\xff"} {
		t.Run("root "+r, func(t *testing.T) {
			_, err := zklock.New(conn, store, zklock.WithRoot(r))
			require.ErrorIs(t, err, inventory.ErrInvalidArgument)
		})
	}
	for _, r := range []string{"/locks", "/a/b/c", "/zookeeper2", "/库存/锁", "/a.b/..c"} {
		_, err := zklock.New(conn, store, zklock.WithRoot(r))
		require.NoError(t, err, "root %q", r)
	}
}

func locker(t *testing.T, conn *zk.Conn, opts ...zklock.Option) lockmgr.Locker {
	l, err := zklock.NewLocker(conn, opts...)
	require.NoError(t, err)
	return l
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nodes lists the nodes in the lock directory of name.
func nodes(t *testing.T, conn *zk.Conn, r, name string) []string {
	children, _, err := conn.Children(zklock.Dir(r, name))
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	require.NoError(t, err)
	return children
}

// TestInOrder: waiters are served in the order they joined ZooKeeper's
// line, and a waiter that withdraws from the middle of it is skipped over.
// Each waiter has a Manager's locker of its own, as in a process of its own.
func TestInOrder(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a := connect(t)
	r := root(t, a.conn)
	const name = "line"
	first, err := locker(t, a.conn, zklock.WithRoot(r)).Acquire(ctx, name)
	require.NoError(t, err)

	const waiters = 6
	var (
		mu    sync.Mutex
		order []int
		wg    sync.WaitGroup
	)
	quitter, quit := context.WithCancel(ctx)
	defer quit()
	for i := range waiters {
		wctx := ctx
		if i == 2 {
			wctx = quitter
		}
		l := locker(t, a.conn, zklock.WithRoot(r))
		wg.Go(func() {
			lease, err := l.Acquire(wctx, name)
			if i == 2 {
				assert.ErrorIs(t, err, context.Canceled)
				return
			}
			if !assert.NoError(t, err) {
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			assert.NoError(t, lease.Release(ctx))
		})
		// Wait until this waiter's node is in line before starting the next.
		require.Eventually(t, func() bool { return len(nodes(t, a.conn, r, name)) == i+2 }, 5*time.Second, time.Millisecond)
	}
	quit()
	require.Eventually(t, func() bool { return len(nodes(t, a.conn, r, name)) == waiters }, 5*time.Second, time.Millisecond,
		"the cancelled waiter removed its node")
	require.NoError(t, first.Release(ctx))
	wg.Wait()
	require.Equal(t, []int{0, 1, 3, 4, 5}, order)
	require.Empty(t, nodes(t, a.conn, r, name))
	exists, _, err := a.conn.Exists(zklock.Dir(r, name))
	require.NoError(t, err)
	require.False(t, exists, "the empty lock directory is deleted")
}

func TestAcquireTimeout(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a := connect(t)
	r := root(t, a.conn)
	holder := locker(t, a.conn, zklock.WithRoot(r), zklock.WithQueueDepth(1), zklock.WithAcquireTimeout(200*time.Millisecond))
	lease, err := holder.Acquire(ctx, "sku")
	require.NoError(t, err)

	// Behind the holder in its own process, a caller waits in the process.
	_, err = holder.Acquire(ctx, "sku")
	require.ErrorIs(t, err, inventory.ErrContention)
	require.Len(t, nodes(t, a.conn, r, "sku"), 1, "the caller queued in the process made no node")

	waiter := locker(t, a.conn, zklock.WithRoot(r), zklock.WithAcquireTimeout(200*time.Millisecond))
	_, err = waiter.Acquire(ctx, "sku")
	require.ErrorIs(t, err, inventory.ErrContention)
	require.Len(t, nodes(t, a.conn, r, "sku"), 1, "the waiter that timed out removed its node")

	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = waiter.Acquire(cctx, "sku")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, inventory.ErrContention)
	// A cancelled call returns at once; its withdrawal goes on behind it.
	require.Eventually(t, func() bool { return len(nodes(t, a.conn, r, "sku")) == 1 }, 5*time.Second, time.Millisecond,
		"the cancelled waiter removed its node")

	require.NoError(t, lease.Release(ctx))
	again, err := waiter.Acquire(ctx, "sku")
	require.NoError(t, err)
	require.NoError(t, again.Release(ctx))
}

// TestNames: any SKU is one path segment of its own.
func TestNames(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a := connect(t)
	r := root(t, a.conn)
	l := locker(t, a.conn, zklock.WithRoot(r))
	names := []string{"/", "a/b", "..", ".", "zookeeper", "{x}", "鞋/42", " ", strings.Repeat("鞋", 85), "_c_x-0000000001"}
	leases := make([]lockmgr.Lease, len(names))
	for i, n := range names {
		var err error
		leases[i], err = l.Acquire(ctx, n) // all held at once: distinct locks
		require.NoError(t, err, "name %q", n)
		d := zklock.Dir(r, n)
		require.Equal(t, r, path.Dir(d), "name %q is one segment", n)
	}
	for _, le := range leases {
		require.NoError(t, le.Release(ctx))
	}
}

// TestSessionLoss cuts the connection under a held lease: the lease is lost
// at once. Reconnection is held off until the session expires; meanwhile
// another session takes the lock, and the first lease's Release, once
// reconnected, finds its node gone with its session.
func TestSessionLoss(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a, b := connect(t), connect(t)
	r := root(t, a.conn)
	la, err := zklock.NewLocker(a.conn, zklock.WithRoot(r), zklock.WithSessionEvents(a.events))
	require.NoError(t, err)
	lease, err := la.Acquire(ctx, "sku")
	require.NoError(t, err)
	select {
	case <-lease.Lost():
		t.Fatal("lost before anything happened")
	default:
	}

	a.cut(true)
	select {
	case <-lease.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("lease not lost after the connection dropped")
	}
	// The session expires on the server 4s after the cut; then b gets in.
	lb := locker(t, b.conn, zklock.WithRoot(r), zklock.WithAcquireTimeout(30*time.Second))
	leaseB, err := lb.Acquire(ctx, "sku")
	require.NoError(t, err)

	a.unblock()
	require.Eventually(t, func() bool { return a.conn.State() == zk.StateHasSession }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, lease.Release(ctx), "the node went with its session")
	require.NoError(t, leaseB.Release(ctx))

	// A new lease on the new session is not lost.
	again, err := la.Acquire(ctx, "sku")
	require.NoError(t, err)
	select {
	case <-again.Lost():
		t.Fatal("a lease of the new session is lost")
	default:
	}
	require.NoError(t, again.Release(ctx))
}

// TestLostWithoutEvents: without the session's events, a lease still
// reports a dropped connection when asked.
func TestLostWithoutEvents(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	a := connect(t)
	r := root(t, a.conn)
	lease, err := locker(t, a.conn, zklock.WithRoot(r)).Acquire(ctx, "sku")
	require.NoError(t, err)
	a.cut(true)
	require.Eventually(t, func() bool {
		select {
		case <-lease.Lost():
			return true
		default:
			return false
		}
	}, 5*time.Second, 5*time.Millisecond)
	a.unblock()
	require.NoError(t, lease.Release(ctx))
}

// TestFirstCallOnFreshConnection does what the package example does: Connect,
// New with the session's events and a Reduce at once, before the handshake
// is done. The call waits for the session and takes its unit.
func TestFirstCallOnFreshConnection(t *testing.T) {
	ctx := ctxFor(t, time.Minute)
	store := storetest.Stores[0].Open(t)
	const sku = "fresh"
	require.NoError(t, store.Init(ctx, sku, 10))
	check := testenv.ZooKeeper(t)
	r := root(t, check)
	for i := range 3 {
		conn, events, err := zk.Connect(testenv.List(testenv.EnvZooKeeper, testenv.DefaultZooKeeper), 4*time.Second, zk.WithLogger(quiet{}))
		require.NoError(t, err)
		m, err := zklock.New(conn, store, zklock.WithRoot(r), zklock.WithSessionEvents(events))
		require.NoError(t, err)
		left, err := m.Reduce(ctx, sku, 1)
		conn.Close()
		require.NoError(t, err, "first call %d on a fresh connection", i)
		require.EqualValues(t, 9-i, left)
	}
}

// TestNoSession: a call on a connection that never gets a session gives up
// at its deadline, with the context's error.
func TestNoSession(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	require.NoError(t, err)
	defer ln.Close()
	conn, events, err := zk.Connect([]string{ln.Addr().String()}, 4*time.Second, zk.WithLogger(quiet{}))
	require.NoError(t, err)
	defer conn.Close()
	m, err := zklock.New(conn, storetest.Stores[0].Open(t), zklock.WithSessionEvents(events))
	require.NoError(t, err)
	_, err = faulttest.CheckLate(t, "Reduce without a session", 300*time.Millisecond, func(ctx context.Context) error {
		_, err := m.Reduce(ctx, "no-session", 1)
		return err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
}
