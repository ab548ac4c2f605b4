package redislock_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/storetest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
)

func TestMain(m *testing.M) {
	testenv.SkipExamplesWithout("^Example$", testenv.RedisServer)
	testenv.SkipExamplesWithout("^Example_sql$", testenv.RedisServer, testenv.PostgresServer)
	faulttest.VerifyTestMain(m)
}

// TestExamples reports the Examples that TestMain left out for want of
// their servers (skipped, or failed when CI=true).
func TestExamples(t *testing.T) { testenv.ExamplesRan(t) }

// backend is where a test keeps its locks and its stock.
type backend struct {
	name string
	// open returns the lock's client and a store, both fresh for t.
	open func(t *testing.T) (redis.UniversalClient, redislock.Store)
}

var backends = []backend{
	{"redis", func(t *testing.T) (redis.UniversalClient, redislock.Store) {
		c := testenv.Redis(t)
		return c, storetest.Redis(t, c)
	}},
	{"cluster", func(t *testing.T) (redis.UniversalClient, redislock.Store) {
		c := testenv.RedisCluster(t)
		return c, storetest.Redis(t, c)
	}},
}

func init() {
	for _, e := range sqltest.Engines {
		backends = append(backends, backend{e.Name, func(t *testing.T) (redis.UniversalClient, redislock.Store) {
			return testenv.Redis(t), storetest.SQL(t, e.Open(t))
		}})
	}
}

// lockPrefix returns a lock prefix unique to t, its keys deleted at the end.
func lockPrefix(t testing.TB, c redis.UniversalClient) string {
	return testenv.RedisPrefix(t, c)
}

func newManager(t *testing.T, c redis.UniversalClient, s redislock.Store, opts ...redislock.Option) *redislock.Manager {
	t.Helper()
	m, err := redislock.New(c, s, opts...)
	require.NoError(t, err)
	return m
}

func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c, s := b.open(t)
			carts := 0 // the suite's default
			if strings.HasPrefix(b.name, "sqlite") {
				// SQLite (sqlite and sqlite-deferred, its DSN as the
				// README shows) has one writer: its busy handler sleeps the
				// lock holders' writes behind the others', and 500
				// carts held line by line outlast the suite's 2-minute
				// bound under -race on a loaded 2-core machine.
				carts = 100
			}
			inventorytest.Run(t, inventorytest.Config{
				NewManager: func(t *testing.T) inventory.StockManager {
					return newManager(t, c, s, redislock.WithPrefix(lockPrefix(t, c)))
				},
				Carts:         carts,
				RequireOrders: true,
			})
		})
	}
}

// procs spreads calls over several Managers with the same locks and store,
// as several processes would: their waiters meet in Redis, not in-process.
type procs []*redislock.Manager

var turn atomic.Uint64

func (p procs) next() *redislock.Manager { return p[turn.Add(1)%uint64(len(p))] }

func (p procs) Init(ctx context.Context, sku string, qty int64) error {
	return p.next().Init(ctx, sku, qty)
}

func (p procs) Get(ctx context.Context, sku string) (int64, error) { return p.next().Get(ctx, sku) }

func (p procs) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return p.next().Reduce(ctx, sku, qty, opts...)
}

func (p procs) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return p.next().Return(ctx, sku, qty, opts...)
}

// TestConformanceManyProcesses runs the suite over four Managers sharing
// locks and stock, with the safety-net wait set to a minute: waiters in one
// "process" are woken by the hand-overs of another.
func TestConformanceManyProcesses(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			c, s := b.open(t)
			inventorytest.Run(t, inventorytest.Config{
				NewManager: func(t *testing.T) inventory.StockManager {
					prefix := lockPrefix(t, c)
					p := make(procs, 4)
					for i := range p {
						p[i] = newManager(t, c, s, redislock.WithPrefix(prefix), redislock.WithMaxWait(time.Minute))
					}
					return p
				},
			})
		})
	}
}

// pausingStore pauses the first CompareAndSet, after the holder's checks and
// its look at Lost, to run pause; blind makes it write unconditionally.
type pausingStore struct {
	redislock.Store
	paused atomic.Bool
	pause  func()
	blind  bool
}

func (p *pausingStore) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir driver.Direction, key string) (bool, error) {
	if !p.paused.Swap(true) {
		p.pause()
	}
	if p.blind {
		_, v, err := p.Read(ctx, sku)
		if err != nil {
			return false, err
		}
		version = v
	}
	return p.Store.CompareAndSet(ctx, sku, version, newStock, dir, key)
}

// TestPausedHolder pauses buyer A between its checks and its write, lets
// its lock lapse and buyer B, in another process, take the last unit. A's
// compare-and-set fails, and its retry finds the stock gone. A store that
// writes unconditionally sells the unit twice.
func TestPausedHolder(t *testing.T) {
	for _, b := range backends {
		for _, blind := range []bool{false, true} {
			name := b.name
			if blind {
				name += " without CAS"
			}
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c, s := b.open(t)
				prefix := lockPrefix(t, c)
				sku := "last-unit"
				ps := &pausingStore{Store: s, blind: blind}
				a := newManager(t, c, ps, redislock.WithPrefix(prefix))
				b := newManager(t, c, s, redislock.WithPrefix(prefix))
				require.NoError(t, a.Init(ctx, sku, 1))
				var errB error
				ps.pause = func() {
					// A's lock lapses while it is paused...
					require.NoError(t, c.Del(ctx, redislock.LockKey(prefix, sku)).Err())
					// ...and B buys the unit.
					_, errB = b.Reduce(ctx, sku, 1, inventory.WithKey("buyer-b"))
				}
				_, errA := a.Reduce(ctx, sku, 1, inventory.WithKey("buyer-a"))
				require.NoError(t, errB)
				final, err := a.Get(ctx, sku)
				require.NoError(t, err)
				require.EqualValues(t, 0, final)
				if blind {
					require.NoError(t, errA, "without the CAS, A overwrites B's sale: the unit is sold twice")
					return
				}
				require.ErrorIs(t, errA, inventory.ErrInsufficientStock, "A retries and finds the stock gone")
			})
		}
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s, err := redisstore.New(c)
	require.NoError(t, err)
	for _, p := range []string{"", "a{b", "}", "a\nb", string(make([]byte, 65))} {
		_, err := redislock.New(c, s, redislock.WithPrefix(p))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "prefix %q", p)
	}
	for _, o := range []redislock.Option{
		redislock.WithTTL(29 * time.Millisecond), redislock.WithTTL(-time.Second),
		redislock.WithAcquireTimeout(0), redislock.WithAcquireTimeout(-time.Second),
	} {
		_, err = redislock.New(c, s, o)
		require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	}
	_, err = redislock.New(nil, s)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = redislock.New(c, nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = redislock.New(c, s, redislock.WithTTL(time.Minute), redislock.WithAcquireTimeout(time.Hour), redislock.WithMaxAttempts(7))
	require.NoError(t, err)
}

func TestServerDown(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer c.Close()
	s, err := redisstore.New(c)
	require.NoError(t, err)
	m := newManager(t, c, s)
	var op *net.OpError
	_, err = m.Reduce(ctx, "shoe", 1)
	require.ErrorAs(t, err, &op)
	require.NotErrorIs(t, err, inventory.ErrInsufficientStock)
	require.NotErrorIs(t, err, inventory.ErrContention)
	_, err = m.Get(ctx, "shoe")
	require.ErrorAs(t, err, &op)
	require.ErrorAs(t, m.Init(ctx, "shoe", 1), &op)
}

// TestLockKeySharesTheStockSlot checks that a lock and its stock share a
// cluster slot, and that lock keys stay apart from the store's keys.
func TestLockKeySharesTheStockSlot(t *testing.T) {
	ctx := context.Background()
	c := testenv.RedisCluster(t)
	for _, sku := range []string{"plain", "}", "}{", "{x}", "a}b{c", "{", "{}", "鞋", ":s:x", "x:s:"} {
		lk := redislock.LockKey("inv", sku)
		sk := rediskeys.Stock("inv", sku)
		require.NotEqual(t, sk, lk)
		require.NotEqual(t, rediskeys.Key("inv", sku, driver.DirReduce, ""), lk)
		a, err := c.ClusterKeySlot(ctx, lk).Result()
		require.NoError(t, err)
		b, err := c.ClusterKeySlot(ctx, sk).Result()
		require.NoError(t, err)
		require.Equal(t, b, a, "sku %q: %s and %s", sku, lk, sk)
	}
	require.NotEqual(t, redislock.LockKey("inv", "a:l:b"), redislock.LockKey("inv", "a"))
}
