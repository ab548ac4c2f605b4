package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
	"github.com/stockkit/inventory/sqllock"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/zklock"
)

// spreadLocks is the spread layout of the lock comparisons.
var spreadLocks = layout{"spread", 256}

// store is a lock strategy's store under comparison, with the bare read
// and write its baseline does on the same data, and the SKUs of both
// layouts initialised to MaxStock/2.
type store struct {
	name  string // as the table shows it: "Redis", "MariaDB", ...
	store lockmgr.Store
	read  func(ctx context.Context, sku string) (int64, error)
	write func(ctx context.Context, sku string, n int64) error
	skus  map[layout][]string
}

func (s *store) init(b *testing.B) *store {
	s.skus = map[layout][]string{}
	for _, l := range []layout{hot, spreadLocks} {
		s.skus[l] = l.names("lock")
		for _, sku := range s.skus[l] {
			if err := s.store.Init(context.Background(), sku, inventory.MaxStock/2); err != nil {
				b.Fatal(err)
			}
		}
	}
	return s
}

// redisStore is a redisstore on c under a fresh prefix.
func redisStore(b *testing.B, name string, c redis.UniversalClient) *store {
	prefix := testenv.RedisPrefix(b, c)
	s, err := redisstore.New(c, redisstore.WithPrefix(prefix))
	if err != nil {
		b.Fatal(err)
	}
	return (&store{
		name:  name,
		store: s,
		read: func(ctx context.Context, sku string) (int64, error) {
			return c.Get(ctx, rediskeys.Stock(prefix, sku)).Int64()
		},
		write: func(ctx context.Context, sku string, n int64) error {
			return c.Set(ctx, rediskeys.Stock(prefix, sku), n, 0).Err()
		},
	}).init(b)
}

// sqlStore is a sqlstore on fresh tables in db.
func sqlStore(b *testing.B, name string, db *sqlx.DB) *store {
	fillPool(b, db, sqlConns)
	schema := sqltest.Schema(b, db)
	s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
	if err != nil {
		b.Fatal(err)
	}
	sel := db.Rebind("SELECT stock FROM " + schema.Table + " WHERE sku = ?")
	upd := db.Rebind("UPDATE " + schema.Table + " SET stock = ? WHERE sku = ?")
	return (&store{
		name:  name,
		store: s,
		read: func(ctx context.Context, sku string) (n int64, err error) {
			return n, db.GetContext(ctx, &n, sel, sku)
		},
		write: func(ctx context.Context, sku string, n int64) error {
			_, err := db.ExecContext(ctx, upd, n, sku)
			return err
		},
	}).init(b)
}

// waits records lock waits.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) add(d time.Duration) {
	w.mu.Lock()
	w.d = append(w.d, d)
	w.mu.Unlock()
}

// pct returns the p-th percentile of the waits.
func (w *waits) pct(p float64) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.d) == 0 {
		return 0
	}
	slices.Sort(w.d)
	return w.d[int(float64(len(w.d)-1)*p)]
}

// timedLocker records in w how long each Acquire waits.
type timedLocker struct {
	lockmgr.Locker
	w *waits
}

func (t timedLocker) Acquire(ctx context.Context, name string) (lockmgr.Lease, error) {
	start := time.Now()
	le, err := t.Locker.Acquire(ctx, name)
	t.w.add(time.Since(start))
	return le, err
}

// naiveLock is a baseline's lock: it returns once the lock on sku is held,
// with the function that releases it.
type naiveLock interface {
	lock(ctx context.Context, sku string) (unlock func(), err error)
}

// tries counts a polling baseline's lock tries and the failed ones.
type tries struct{ n, failed atomic.Int64 }

func (t *tries) failedPct() float64 {
	return 100 * float64(t.failed.Load()) / float64(max(t.n.Load(), 1))
}

var tokenRelease = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// setNX is redislock's baseline: SET NX PX with a random token, retried
// every millisecond, released by a token-checked DEL script.
type setNX struct {
	c      redis.UniversalClient
	prefix string
	tries
}

func (l *setNX) lock(ctx context.Context, sku string) (func(), error) {
	key, token := redislock.LockKey(l.prefix, sku), rand.Text()
	for {
		l.n.Add(1)
		ok, err := l.c.SetNX(ctx, key, token, 5*time.Second).Result()
		if err != nil {
			return nil, err
		}
		if ok {
			return func() { tokenRelease.Run(context.WithoutCancel(ctx), l.c, []string{key}, token) }, nil
		}
		l.failed.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// bareRedlock is redlock's baseline: SET NX PX with a random token on every
// node at once, held on a majority, else undone and retried after 1ms;
// released by a token-checked DEL on every node.
type bareRedlock struct {
	nodes  []redis.UniversalClient
	prefix string
	tries
}

// all runs f on every node at once and counts the successes.
func (l *bareRedlock) all(f func(c redis.UniversalClient) bool) int {
	var n atomic.Int64
	var wg sync.WaitGroup
	for _, c := range l.nodes {
		wg.Go(func() {
			if f(c) {
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return int(n.Load())
}

func (l *bareRedlock) lock(ctx context.Context, sku string) (func(), error) {
	key, token := l.prefix+sku, rand.Text()
	release := func() {
		l.all(func(c redis.UniversalClient) bool {
			return tokenRelease.Run(context.WithoutCancel(ctx), c, []string{key}, token).Err() == nil
		})
	}
	for {
		l.n.Add(1)
		n := l.all(func(c redis.UniversalClient) bool {
			ok, err := c.SetNX(ctx, key, token, redlock.DefaultExpiry).Result()
			return ok && err == nil
		})
		if n > len(l.nodes)/2 {
			return release, nil
		}
		release()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		l.failed.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// zkLock is zklock's baseline: go-zookeeper's own zk.Lock, one per call,
// under a directory per SKU.
type zkLock struct {
	conn *zk.Conn
	root string
}

func (l *zkLock) lock(_ context.Context, sku string) (func(), error) {
	lk := zk.NewLock(l.conn, l.root+"/"+hex.EncodeToString([]byte(sku)), zk.WorldACL(zk.PermAll))
	if err := lk.Lock(); err != nil {
		return nil, err
	}
	return func() { _ = lk.Unlock() }, nil
}

// advisory is sqllock's baseline: the engine's try-lock (MariaDB
// GET_LOCK(name, 0), PostgreSQL pg_try_advisory_lock) on a pinned
// connection, retried every millisecond.
type advisory struct {
	db *sqlx.DB
	tries
}

func (l *advisory) lock(ctx context.Context, sku string) (func(), error) {
	h := fnv.New64a()
	h.Write([]byte("bench:" + sku))
	var key any = fmt.Sprintf("bench:%016x", h.Sum64())
	lock, unlock := "SELECT GET_LOCK(?, 0)", "SELECT RELEASE_LOCK(?)"
	if l.db.DriverName() != "mysql" {
		key, lock, unlock = int64(h.Sum64()), "SELECT pg_try_advisory_lock($1)", "SELECT pg_advisory_unlock($1)"
	}
	for {
		l.n.Add(1)
		conn, err := l.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		var ok sql.NullBool
		if err := conn.QueryRowContext(ctx, lock, key).Scan(&ok); err != nil {
			discard(conn) // the lock may be held: end the session
			return nil, err
		}
		if ok.Bool {
			return func() {
				var released sql.NullBool
				if conn.QueryRowContext(context.WithoutCancel(ctx), unlock, key).Scan(&released) != nil {
					discard(conn)
					return
				}
				conn.Close()
			}, nil
		}
		conn.Close()
		l.failed.Add(1)
		time.Sleep(time.Millisecond)
	}
}

// discard closes conn and ends its session.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// lockCase is one row of the lock comparisons.
type lockCase struct {
	strategy string
	st       *store
	l        layout
	g        int
	procs    bool // one Manager per goroutine, as one process per buyer
	// locker returns a fresh Locker of the strategy; naive the baseline.
	locker func() lockmgr.Locker
	naive  naiveLock
	tries  *tries // the baseline's lock tries, if it polls
	// turnScale lengthens the turns of slow cases (benchcmp.Case.TurnScale).
	turnScale int
}

func (lc lockCase) run(b *testing.B) {
	var lw, bw waits
	if lc.tries != nil { // one baseline serves several cases
		lc.tries.n.Store(0)
		lc.tries.failed.Store(0)
	}
	managers := make([]*lockmgr.Manager, 1)
	if lc.procs {
		managers = make([]*lockmgr.Manager, lc.g)
	}
	for i := range managers {
		m, err := lockmgr.NewManager(timedLocker{Locker: lc.locker(), w: &lw}, lc.st.store)
		if err != nil {
			b.Fatal(err)
		}
		managers[i] = m
	}
	skus := lc.st.skus[lc.l]
	strategy := lc.strategy + ", " + lc.st.name + " store"
	if lc.procs {
		strategy += ", 1 Manager per goroutine"
	}
	name := lc.strategy + ", " + lc.st.name + " store, " + lc.l.name
	if lc.procs {
		name += ", 1 Manager per goroutine"
	}
	st := lc.st
	benchcmp.Run(b, benchcmp.Case{
		Group:      "locks",
		Name:       name,
		Layout:     lc.l.String(),
		Goroutines: lc.g,
		TurnScale:  lc.turnScale,
		Strategy: benchcmp.Side{Name: strategy, Op: func(ctx context.Context, w int, rng *mrand.Rand) error {
			_, err := managers[w%len(managers)].Reduce(ctx, pick(rng, skus), 1)
			return err
		}},
		Baseline: benchcmp.Side{Name: baselineName[lc.strategy], Op: func(ctx context.Context, _ int, rng *mrand.Rand) error {
			sku := pick(rng, skus)
			start := time.Now()
			unlock, err := lc.naive.lock(ctx, sku)
			if err != nil {
				return err
			}
			bw.add(time.Since(start))
			defer unlock()
			n, err := st.read(ctx, sku)
			if err != nil {
				return err
			}
			if n < 1 {
				return errors.New("baseline ran out of stock")
			}
			return st.write(ctx, sku, n-1)
		}},
		Note: func() string {
			s := fmt.Sprintf("lock wait p50/p99 %s/%s, baseline's %s/%s", ms(lw.pct(0.5)), ms(lw.pct(0.99)), ms(bw.pct(0.5)), ms(bw.pct(0.99)))
			if lc.tries != nil {
				s += fmt.Sprintf(", %.0f%% of its tries failing", lc.tries.failedPct())
			}
			return s
		},
	})
}

// baselineName is each lock strategy's baseline, as the table shows it.
var baselineName = map[string]string{
	"redislock": "SET-NX loop (1ms retry), GET, SET, DEL",
	"redlock":   "bare Redlock on 3 nodes (1ms retry), read, write",
	"zklock":    "go-zookeeper zk.Lock, read, write",
	"sqllock":   "bare try-lock loop (1ms retry), read, write",
}

func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond))
}

// standard are the rows each lock strategy runs on its main store: hot at
// 16 and 64 goroutines, spread at 64, and hot with one Manager per
// goroutine (many processes on one SKU) at 64.
func standard(lc lockCase) []lockCase {
	var out []lockCase
	for _, v := range []struct {
		l     layout
		g     int
		procs bool
	}{{hot, 16, false}, {hot, 64, false}, {spreadLocks, 64, false}, {hot, 64, true}} {
		c := lc
		c.l, c.g, c.procs = v.l, v.g, v.procs
		out = append(out, c)
	}
	return out
}

// BenchmarkLocks compares each lock strategy, over lockmgr, with the bare
// lock-read-write-unlock loop it replaces, doing the same round trips on
// the same data with no library.
//
// sqllock runs hot at 16 goroutines only, with one Manager and with one
// Manager per goroutine: each of its waiters holds a connection.
func BenchmarkLocks(b *testing.B) {
	b.Run("redislock", func(b *testing.B) {
		c := testenv.Redis(b)
		prefix := testenv.RedisPrefix(b, c)
		locker := func(c redis.UniversalClient, prefix string) func() lockmgr.Locker {
			return func() lockmgr.Locker {
				l, err := redislock.NewLocker(c, redislock.WithPrefix(prefix))
				if err != nil {
					b.Fatal(err)
				}
				return l
			}
		}
		nx := &setNX{c: c, prefix: prefix + "naive"}
		base := lockCase{strategy: "redislock", st: redisStore(b, "Redis", c), locker: locker(c, prefix), naive: nx, tries: &nx.tries}
		cases := standard(base)
		cl := testenv.RedisCluster(b)
		cprefix := testenv.RedisPrefix(b, cl)
		cnx := &setNX{c: cl, prefix: cprefix + "naive"}
		cases = append(cases, lockCase{strategy: "redislock", st: redisStore(b, "Cluster", cl), l: hot, g: 64,
			locker: locker(cl, cprefix), naive: cnx, tries: &cnx.tries})
		for _, e := range sqltest.Engines[:2] {
			c := base
			c.st, c.l, c.g = sqlStore(b, engineNames[e.Name], e.Open(b)), hot, 64
			cases = append(cases, c)
		}
		for _, lc := range cases {
			lc.run(b)
		}
	})
	b.Run("redlock", func(b *testing.B) {
		var nodes []redis.UniversalClient
		for _, c := range testenv.RedlockClients(b) {
			nodes = append(nodes, c)
		}
		prefix := testenv.RedisPrefix(b, nodes[0]) + ":"
		for _, c := range nodes[1:] {
			b.Cleanup(func() { testenv.DeleteKeys(b, c, prefix+"*") })
		}
		bl := &bareRedlock{nodes: nodes, prefix: prefix + "bare:"}
		for _, lc := range standard(lockCase{strategy: "redlock", st: redisStore(b, "Redis", testenv.Redis(b)),
			locker: func() lockmgr.Locker {
				l, err := redlock.NewLocker(nodes, redlock.WithPrefix(prefix))
				if err != nil {
					b.Fatal(err)
				}
				return l
			}, naive: bl, tries: &bl.tries}) {
			lc.run(b)
		}
	})
	b.Run("zklock", func(b *testing.B) {
		conn := testenv.ZooKeeper(b)
		root := "/inventory-bench/" + testenv.Prefix()
		b.Cleanup(func() {
			removeAll(conn, root)
			_ = conn.Delete("/inventory-bench", -1) // fails while another run uses it
		})
		for _, lc := range standard(lockCase{strategy: "zklock", st: redisStore(b, "Redis", testenv.Redis(b)),
			locker: func() lockmgr.Locker {
				l, err := zklock.NewLocker(conn, zklock.WithRoot(root+"/lib"))
				if err != nil {
					b.Fatal(err)
				}
				return l
			}, naive: &zkLock{conn: conn, root: root + "/base"},
			turnScale: 2, // ZooKeeper does a few hundred ops/s here: 1s turns are noisy
		}) {
			lc.run(b)
		}
	})
	b.Run("sqllock", func(b *testing.B) {
		for _, e := range sqltest.Engines[:2] {
			// The locks on a pool of their own, as sqllock's doc advises.
			locks := e.Open(b)
			fillPool(b, locks, sqlConns)
			adv := &advisory{db: locks}
			lc := lockCase{strategy: "sqllock", st: sqlStore(b, engineNames[e.Name], e.Open(b)), l: hot, g: 16,
				locker: func() lockmgr.Locker {
					l, err := sqllock.NewLocker(locks)
					if err != nil {
						b.Fatal(err)
					}
					return l
				}, naive: adv, tries: &adv.tries}
			lc.run(b)
			lc.procs = true // each Manager waits in the database on its own
			lc.run(b)
		}
	})
}

// removeAll deletes p and everything under it, best effort.
func removeAll(conn *zk.Conn, p string) {
	children, _, _ := conn.Children(p)
	for _, c := range children {
		removeAll(conn, p+"/"+c)
	}
	_ = conn.Delete(p, -1)
}
