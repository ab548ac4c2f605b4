//go:build drills

package drills

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/zklock"
)

// holders counts double holders: a Lease taken on a name while another
// Lease on it is neither released nor told lost (its Lost channel open).
// It sits around the Locker, outside the Store's compare-and-set, which
// would hide a double holder by failing the late write.
type holders struct {
	mu      sync.Mutex
	held    map[string][]*probeLease
	doubles atomic.Int64
}

type probeLocker struct {
	lockmgr.Locker
	h *holders
}

type probeLease struct {
	lockmgr.Lease
	h    *holders
	name string
}

func (l probeLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	lease, err := l.Locker.Acquire(ctx, name)
	if err != nil {
		return nil, err
	}
	pl := &probeLease{Lease: lease, h: l.h, name: name}
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	for _, o := range l.h.held[name] {
		select {
		case <-o.Lost():
		default:
			l.h.doubles.Add(1)
		}
	}
	l.h.held[name] = append(l.h.held[name], pl)
	return pl, nil
}

// Release forgets the lease before it frees the lock.
func (pl *probeLease) Release(ctx context.Context) error {
	pl.h.mu.Lock()
	l := pl.h.held[pl.name]
	for i, o := range l {
		if o == pl {
			pl.h.held[pl.name] = append(l[:i], l[i+1:]...)
			break
		}
	}
	pl.h.mu.Unlock()
	return pl.Lease.Release(ctx)
}

// ordered is a zk.HostProvider that tries first, then the others in turn,
// so that a drill knows which server each Manager's session starts on
// (zk.Connect shuffles the servers it is given).
type ordered struct {
	first   string
	mu      sync.Mutex
	servers []string
	next    int
	tried   int
}

func (o *ordered) Init(servers []string) error {
	o.servers = append([]string{o.first}, slices.DeleteFunc(servers, func(s string) bool { return s == o.first })...)
	return nil
}
func (o *ordered) Len() int   { return len(o.servers) }
func (o *ordered) Connected() { o.mu.Lock(); o.tried = 0; o.mu.Unlock() }
func (o *ordered) Next() (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := o.servers[o.next]
	o.next = (o.next + 1) % len(o.servers)
	o.tried++
	retryStart := o.tried > len(o.servers)
	if retryStart {
		o.tried = 1
	}
	return s, retryStart
}

// quiet drops go-zookeeper's log.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

// TestZooKeeper: an ensemble of three; zklock over redisstore (a private
// standalone Redis) sells from two Managers, each on a session of its own,
// through a SIGKILL of the leader (restarted once another leads) and a
// follower stopped (SIGSTOP) for 5s. One Manager's session starts on the
// struck server, the other's elsewhere.
func TestZooKeeper(t *testing.T) {
	ens := faulttest.StartEnsemble(t, 3)
	rp := faulttest.StartRedis(t)
	for _, ev := range []string{"SIGKILL leader", "SIGSTOP follower 5s"} {
		t.Run(ev, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := faulttest.Eventually(ctx, func() error { return ens.Settled(ctx) }); err != nil {
				t.Fatal(err)
			}
			target, err := ens.Leader()
			if err != nil {
				t.Fatal(err)
			}
			if ev != "SIGKILL leader" {
				for _, p := range ens.Servers {
					if p != target {
						target = p
						break
					}
				}
			}
			var other *faulttest.Process
			for _, p := range ens.Servers {
				if p != target {
					other = p
				}
			}
			rdb := redis.NewClient(&redis.Options{Addr: rp.Addr(), PoolSize: 2 * workers,
				DialTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			store, err := redisstore.New(rdb, redisstore.WithPrefix(prefix()))
			if err != nil {
				t.Fatal(err)
			}
			h := &holders{held: map[string][]*probeLease{}}
			root := "/" + prefix()
			var managers []inventory.StockManager
			for _, first := range []*faulttest.Process{target, other} {
				conn, events, err := zk.Connect(ens.Addrs(), 4*time.Second, zk.WithHostProvider(&ordered{first: first.Addr()}), zk.WithLogger(quiet{}))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(conn.Close)
				l, err := zklock.NewLocker(conn, zklock.WithRoot(root), zklock.WithSessionEvents(events))
				if err != nil {
					t.Fatal(err)
				}
				m, err := lockmgr.NewManager(probeLocker{l, h}, store, lockmgr.WithName("zklock"))
				if err != nil {
					t.Fatal(err)
				}
				managers = append(managers, m)
			}
			d := drill{name: "ZooKeeper: " + ev, strategy: "zklock+redisstore", options: "two Managers",
				hot: "hot", m: &alternate{ms: managers}, probe: h}
			switch ev {
			case "SIGKILL leader":
				// A supervisor restarts the killed server once the
				// others elected a leader; it rejoins as a follower.
				d.strike = func(ctx context.Context) error {
					target.Kill()
					err := faulttest.Eventually(ctx, func() error {
						_, err := ens.Leader()
						return err
					})
					target.Start()
					return err
				}
				d.settle = ens.Settled
			default:
				d.strike = func(ctx context.Context) error {
					target.Pause()
					defer target.Resume()
					select {
					case <-time.After(5 * time.Second):
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				d.settle = ens.Settled
			}
			runDrill(t, d)
		})
	}
}

// alternate spreads calls over Managers in turn, as a load balancer in
// front of two processes would.
type alternate struct {
	ms []inventory.StockManager
	n  atomic.Uint64
}

func (a *alternate) pick() inventory.StockManager { return a.ms[a.n.Add(1)%uint64(len(a.ms))] }

func (a *alternate) Init(ctx context.Context, sku string, qty int64) error {
	return a.ms[0].Init(ctx, sku, qty)
}

func (a *alternate) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return a.pick().Reduce(ctx, sku, qty, opts...)
}

func (a *alternate) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return a.pick().Return(ctx, sku, qty, opts...)
}

func (a *alternate) Get(ctx context.Context, sku string) (int64, error) { return a.ms[0].Get(ctx, sku) }

// free is a Locker that grants every Acquire at once, for TestProbe; its
// leases are lost when lost is closed.
type free struct{ lost chan struct{} }

func (f free) Acquire(context.Context, string) (lockmgr.Lease, error) { return f, nil }
func (f free) Lost() <-chan struct{}                                  { return f.lost }
func (f free) Release(context.Context) error                          { return nil }

// TestProbe checks the double-holder probe itself: a second lease on a
// name while the first is held counts, one on another name or after a
// release does not, nor one taken while the holder's lease is known lost.
func TestProbe(t *testing.T) {
	ctx := context.Background()
	h := &holders{held: map[string][]*probeLease{}}
	held := probeLocker{free{make(chan struct{})}, h}
	a, _ := held.Acquire(ctx, "x")
	b, _ := held.Acquire(ctx, "y")
	if n := h.doubles.Load(); n != 0 {
		t.Fatalf("two names: %d double holders", n)
	}
	c, _ := held.Acquire(ctx, "x")
	if n := h.doubles.Load(); n != 1 {
		t.Fatalf("two leases on x: %d double holders, want 1", n)
	}
	for _, l := range []lockmgr.Lease{a, b, c} {
		_ = l.Release(ctx)
	}
	d, _ := held.Acquire(ctx, "x")
	if n := h.doubles.Load(); n != 1 {
		t.Fatalf("after the releases: %d double holders, want still 1", n)
	}
	_ = d.Release(ctx)

	lost := make(chan struct{})
	close(lost)
	gone := probeLocker{free{lost}, h}
	e, _ := gone.Acquire(ctx, "z")
	f, _ := held.Acquire(ctx, "z")
	if n := h.doubles.Load(); n != 1 {
		t.Fatalf("a lease taken after the holder was told lost: %d double holders, want still 1", n)
	}
	_, _ = e.Release(ctx), f.Release(ctx)
}
