package tiered

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
)

// engines are the SQL servers every test runs on.
var engines = []struct {
	name string
	open func(testing.TB) *sqlx.DB
}{
	{"mariadb", testenv.MySQL},
	{"postgres", testenv.Postgres},
	{"sqlite", testenv.SQLite},
}

// env is a Redis prefix and a table prefix of one test, both deleted when
// it ends.
type env struct {
	rdb    redis.UniversalClient
	db     *sqlx.DB
	prefix string
	tables string
}

func newEnv(t *testing.T, rdb redis.UniversalClient, db *sqlx.DB) *env {
	t.Helper()
	e := &env{rdb: rdb, db: db, prefix: testenv.RedisPrefix(t, rdb), tables: testenv.Prefix() + "_"}
	m := e.manager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, m.CreateTables(ctx))
	m.Close() // it only drops the tables: off the client's restart watch
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		assert.NoError(t, m.dropTables(ctx))
	})
	return e
}

// manager returns a Manager over e's keys and tables, closed when t ends.
func (e *env) manager(t *testing.T, opts ...Option) *Manager {
	t.Helper()
	m, err := New(e.rdb, e.db, append([]Option{WithPrefix(e.prefix), WithTablePrefix(e.tables)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return m
}

// totals are one SKU's figures in SQL and Redis.
type totals struct {
	pool, sold, returned, direct, lost, gen, last, granted int64 // SQL
	allot, view, g                                         int64 // Redis: a, p, g
}

func (m *Manager) totals(ctx context.Context, t *testing.T, sku string) totals {
	t.Helper()
	var s totals
	require.NoError(t, m.db.QueryRowxContext(ctx, m.q.totals, sku).Scan(&s.pool, &s.sold, &s.returned, &s.direct, &s.lost, &s.gen, &s.last, &s.granted))
	v, err := m.rdb.HMGet(ctx, m.stateKey(sku), "a", "p", "g").Result()
	require.NoError(t, err)
	for i, p := range []*int64{&s.allot, &s.view, &s.g} {
		if v[i] != nil {
			*p, err = strconv.ParseInt(v[i].(string), 10, 64)
			require.NoError(t, err)
		}
	}
	return s
}

// checkSQL asserts what holds in SQL at every moment: the pool, the
// grants and SQL's own sales add up to the initial stock, and synced sales never pass what
// was granted. So what SQL could sell on its own (the pool) never
// includes a unit Redis holds or sold.
func checkSQL(t *testing.T, s totals, initial int64) {
	t.Helper()
	assert.GreaterOrEqual(t, s.pool, int64(0), "pool")
	assert.Equal(t, initial, s.pool+s.granted+s.direct, "pool + granted + direct sales == initial: %+v", s)
	assert.LessOrEqual(t, s.sold-s.returned, s.granted, "synced net sales within the grants: %+v", s)
}

// checkDrained asserts what holds once the journal is drained: Redis's
// allotment is the grants less the net sales, so nothing was created or
// lost, and SQL's pool plus Redis's allotment plus net sales is initial.
func checkDrained(t *testing.T, s totals, initial int64) {
	t.Helper()
	checkSQL(t, s, initial)
	assert.Equal(t, s.granted-s.sold+s.returned-s.lost, s.allot, "Redis allotment == granted - sold + returned - lost: %+v", s)
	assert.Equal(t, s.last, s.g, "Redis applied every grant: %+v", s)
	assert.Equal(t, s.pool, s.view, "Redis's view of the pool is SQL's: %+v", s)
}

// drained drains m's journal and returns sku's totals, checked by
// checkDrained against the initial stock.
func (m *Manager) drained(ctx context.Context, t *testing.T, sku string, initial int64) totals {
	t.Helper()
	require.NoError(t, m.Drain(ctx))
	s := m.totals(ctx, t, sku)
	checkDrained(t, s, initial)
	return s
}

// onEngines runs f as a subtest per SQL engine, named by it, with an env
// of rdb and that engine and a ctx that ends after a minute.
func onEngines(t *testing.T, rdb redis.UniversalClient, f func(ctx context.Context, t *testing.T, e *env)) {
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, rdb, eng.open(t))
			f(ctxT(t, time.Minute), t, e)
		})
	}
}

// reduceN makes n Reduces of qty units of sku, each acknowledged.
func (m *Manager) reduceN(ctx context.Context, t *testing.T, sku string, qty int64, n int) {
	t.Helper()
	for range n {
		_, err := m.Reduce(ctx, sku, qty)
		require.NoError(t, err)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestConformance(t *testing.T) {
	rdb := testenv.Redis(t)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, rdb, eng.open(t))
			t.Run("default", func(t *testing.T) {
				inventorytest.Run(t, inventorytest.Config{
					NewManager:    func(t *testing.T) inventory.StockManager { return e.manager(t) },
					RequireOrders: true,
				})
			})
			// Small chunks: most calls of the concurrent subtests meet a
			// grant, a refill or both.
			t.Run("chunk3", func(t *testing.T) {
				inventorytest.Run(t, inventorytest.Config{
					NewManager: func(t *testing.T) inventory.StockManager {
						return e.manager(t, WithChunk(3), WithLowWater(1), WithMaxAttempts(20))
					},
					RequireOrders: true,
				})
			})
			if eng.name != "mariadb" {
				return // one engine is enough beside the Cluster
			}
			t.Run("cluster", func(t *testing.T) {
				ce := newEnv(t, testenv.RedisCluster(t), e.db)
				inventorytest.Run(t, inventorytest.Config{
					NewManager:    func(t *testing.T) inventory.StockManager { return ce.manager(t, WithChunk(5), WithLowWater(2)) },
					RequireOrders: true,
				})
			})
		})
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	db := sqlx.NewDb(nil, "mysql")
	for name, o := range map[string]Option{
		"chunk 0":        WithChunk(0),
		"chunk past max": WithChunk(inventory.MaxStock + 1),
		"low water < 0":  WithLowWater(-1),
		"low > chunk":    WithLowWater(DefaultChunk + 1),
		"key ttl 0":      WithKeyTTL(0),
		"refill 0":       WithRefillTimeout(0),
		"attempts 1":     WithMaxAttempts(1),
		"batch 0":        WithSyncBatch(0),
		"interval 0":     WithSyncInterval(0),
		"claim idle 0":   WithClaimIdle(0),
		"breaker 0":      WithBreaker(0, time.Second),
		"breaker open 0": WithBreaker(1, 0),
		"prefix {":       WithPrefix("a{b"),
		"prefix empty":   WithPrefix(""),
		"tables dash":    WithTablePrefix("a-b"),
		"tables quote":   WithTablePrefix("a`b"),
		"tables empty":   WithTablePrefix(""),
	} {
		_, err := New(rdb, db, o)
		assert.ErrorIs(t, err, inventory.ErrInvalidArgument, name)
	}
	_, err := New(rdb, sqlx.NewDb(nil, "sqlserver"))
	assert.ErrorIs(t, err, inventory.ErrInvalidArgument, "unsupported driver")
	m, err := New(rdb, db, nil, WithChunk(10), WithChunk(20))
	require.NoError(t, err, "nil option ignored")
	assert.EqualValues(t, 20, m.cfg.chunk, "last option wins")
	assert.EqualValues(t, 5, m.cfg.lowWater, "low water defaults to a quarter of the chunk")
}

// TestFlashSale sells a hot SKU to 2,000 buyers at once, with small
// chunks and two syncers running, checks SQL's invariant while it runs and
// everything across SQL and Redis after Drain.
func TestFlashSale(t *testing.T) {
	rdb := testenv.Redis(t)
	for _, eng := range engines {
		t.Run(eng.name, func(t *testing.T) {
			e := newEnv(t, rdb, eng.open(t))
			m := e.manager(t, WithChunk(20), WithLowWater(8), WithMaxAttempts(50))
			ctx := ctxT(t, 2*time.Minute)
			const initial, buyers = 500, 2000
			sku := "hot {sku}"
			require.NoError(t, m.Init(ctx, sku, initial))

			// Two syncers, in other Managers (other consumers).
			syncCtx, stopSync := context.WithCancel(ctx)
			var syncers sync.WaitGroup
			var syncErrs atomic.Int64
			for range 2 {
				s := e.manager(t, WithSyncInterval(5*time.Millisecond), WithSyncErrors(func(error) { syncErrs.Add(1) }))
				syncers.Add(1)
				go func() { defer syncers.Done(); _ = s.Run(syncCtx) }()
			}
			// A sampler checks SQL's side while the sale runs.
			sampleCtx, stopSample := context.WithCancel(ctx)
			sampled := make(chan int)
			go func() {
				n := 0
				defer func() { sampled <- n }()
				for sampleCtx.Err() == nil {
					var s totals
					if err := m.db.QueryRowxContext(sampleCtx, m.q.totals, sku).Scan(&s.pool, &s.sold, &s.returned, &s.direct, &s.lost, &s.gen, &s.last, &s.granted); err != nil {
						if sampleCtx.Err() == nil {
							t.Errorf("sample: %v", err)
						}
						return
					}
					checkSQL(t, s, initial)
					n++
				}
			}()

			var sold, refused, dups atomic.Int64
			var wg sync.WaitGroup
			gun := make(chan struct{})
			for i := range buyers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-gun
					var opts []inventory.Option
					if i%2 == 0 {
						opts = append(opts, inventory.WithKey("buyer-"+strconv.Itoa(i)))
					}
					for {
						rem, err := m.Reduce(ctx, sku, 1, opts...)
						switch {
						case errors.Is(err, inventory.ErrContention):
							continue
						case err == nil:
							sold.Add(1)
							assert.GreaterOrEqual(t, rem, int64(0))
							if len(opts) > 0 { // a resent keyed call changes nothing
								_, err := m.Reduce(ctx, sku, 1, opts...)
								assert.ErrorIs(t, err, inventory.ErrDuplicate)
								dups.Add(1)
							}
						case errors.Is(err, inventory.ErrInsufficientStock):
							refused.Add(1)
						default:
							t.Errorf("buyer %d: %v", i, err)
						}
						return
					}
				}()
			}
			close(gun)
			wg.Wait()
			require.NoError(t, m.Drain(ctx))
			stopSample()
			n := <-sampled
			stopSync()
			syncers.Wait()

			s := m.totals(ctx, t, sku)
			t.Logf("%s: sold %d, refused %d, duplicates %d; SQL sold %d, pool %d, %d grants of %d units; stalls %d, refill failures %d; %d samples; sync errors %d",
				eng.name, sold.Load(), refused.Load(), dups.Load(), s.sold, s.pool, s.last, s.granted, m.Stalls(), m.RefillFailures(), n, syncErrs.Load())
			assert.Equal(t, int64(initial), sold.Load(), "every unit sold, none twice")
			assert.Equal(t, int64(buyers-initial), refused.Load())
			assert.Equal(t, sold.Load(), s.sold, "after Drain, SQL's sold == the reduces Redis acknowledged")
			assert.Zero(t, s.returned)
			checkDrained(t, s, initial)
			assert.Zero(t, s.allot)
			assert.Zero(t, syncErrs.Load())
			lag, err := m.Lag(ctx)
			require.NoError(t, err)
			assert.Zero(t, lag)
		})
	}
}

// TestSyncKilledBeforeAck: a syncer commits entries and dies before it
// acknowledges them; another syncer takes them over and the ledger keeps
// them from being applied twice.
func TestSyncKilledBeforeAck(t *testing.T) {
	onEngines(t, testenv.Redis(t), func(ctx context.Context, t *testing.T, e *env) {
		m := e.manager(t, WithChunk(4))
		const sku = "a"
		require.NoError(t, m.Init(ctx, sku, 10))
		m.reduceN(ctx, t, sku, 1, 7)
		_, err := m.Return(ctx, sku, 2)
		require.NoError(t, err)

		dying := e.manager(t)
		dying.beforeAck = func() error { return errors.New("killed") }
		n, err := dying.Sync(ctx)
		require.Error(t, err)
		assert.Equal(t, 8, n, "committed, then killed")
		s := m.totals(ctx, t, sku)
		assert.EqualValues(t, 7, s.sold, "committed before the kill")
		assert.EqualValues(t, 2, s.returned)
		lag, err := m.Lag(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 8, lag, "nothing acknowledged")

		// Not yet idle long enough: the other syncer leaves them.
		patient := e.manager(t, WithClaimIdle(time.Hour))
		n, err = patient.Sync(ctx)
		require.NoError(t, err)
		assert.Zero(t, n)
		lag, err = m.Lag(ctx)
		require.NoError(t, err)
		assert.EqualValues(t, 8, lag)

		other := e.manager(t, WithClaimIdle(time.Millisecond))
		time.Sleep(5 * time.Millisecond)
		n, err = other.Sync(ctx)
		require.NoError(t, err)
		assert.Zero(t, n, "taken over, found in the ledger, acknowledged, not applied again")
		s = m.drained(ctx, t, sku, 10)
		assert.EqualValues(t, 7, s.sold)
		assert.EqualValues(t, 2, s.returned)
	})
}

// TestGrantAppliesOnce applies the same grants again, and out of turn: the
// allotment moves once per grant id.
func TestGrantAppliesOnce(t *testing.T) {
	rdb := testenv.Redis(t)
	e := newEnv(t, rdb, testenv.MySQL(t))
	ctx := ctxT(t, time.Minute)
	m := e.manager(t, WithChunk(10))
	const sku = "a"
	require.NoError(t, m.Init(ctx, sku, 100))
	_, err := m.grant(ctx, sku, 0, 0)
	require.NoError(t, err)
	_, err = m.grant(ctx, sku, 0, 0)
	require.NoError(t, err)
	s := m.totals(ctx, t, sku)
	assert.EqualValues(t, 2, s.last)
	assert.EqualValues(t, 20, s.allot)
	keys := []string{m.stateKey(sku)}
	for _, args := range [][]any{
		{s.gen, 2, 80, 1, 10, 2, 10}, // both again
		{s.gen, 1, 90, 1, 10},        // the first again, with an older pool
		{s.gen - 1, 1, 90, 1, 10},    // an older generation
	} {
		_, _, err := applyScript.Run(ctx, rdb, 0, 0, keys, args...)
		require.NoError(t, err)
	}
	cmd, _, err := applyScript.Run(ctx, rdb, 0, 0, keys, s.gen, 4, 60, 4, 10)
	require.NoError(t, err)
	gap, _ := cmd.Int64()
	require.EqualValues(t, -3, gap, "a gap is refused")
	after := m.totals(ctx, t, sku)
	assert.Equal(t, s, after, "nothing moved")
	checkDrained(t, after, 100)
	v, err := m.Get(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 100, v)
}

// TestWarmUpFenced: a warm-up of an older generation, late or repeated,
// never overwrites newer Redis state; a SKU Redis lost is warmed from SQL
// with an empty allotment (its old allotment is not reused: never an
// oversell).
func TestWarmUpFenced(t *testing.T) {
	rdb := testenv.Redis(t)
	e := newEnv(t, rdb, testenv.Postgres(t))
	ctx := ctxT(t, time.Minute)
	m := e.manager(t, WithChunk(10))
	const sku = "a"
	require.NoError(t, m.Init(ctx, sku, 5))
	require.NoError(t, m.Init(ctx, sku, 50))
	rem, err := m.Reduce(ctx, sku, 3)
	require.NoError(t, err)
	assert.EqualValues(t, 47, rem)
	before := m.totals(ctx, t, sku)
	assert.EqualValues(t, 2, before.gen)
	wrote, err := m.warmWith(ctx, sku, 1, 0, 5)
	require.NoError(t, err)
	assert.False(t, wrote, "late warm-up of generation 1")
	n, err := m.Warm(ctx, sku)
	require.NoError(t, err)
	assert.Zero(t, n, "repeated warm-up of generation 2")
	n, err = m.Warm(ctx)
	require.NoError(t, err)
	assert.Zero(t, n, "warm-up of every SKU")
	assert.Equal(t, before, m.totals(ctx, t, sku))

	// Redis loses the SKU: the next call warms it up from SQL.
	require.NoError(t, rdb.Del(ctx, m.stateKey(sku)).Err())
	v, err := m.Get(ctx, sku)
	require.NoError(t, err)
	assert.EqualValues(t, 40, v, "the pool; the lost allotment of 7 is not reused")
	rem, err = m.Reduce(ctx, sku, 1)
	require.NoError(t, err)
	assert.EqualValues(t, 39, rem)
	require.NoError(t, m.Drain(ctx))
	s := m.totals(ctx, t, sku)
	checkSQL(t, s, 50)
	assert.EqualValues(t, 4, s.sold)
	assert.LessOrEqual(t, s.pool+s.allot+s.sold, int64(50), "lost units are an undersell, never an oversell")

	_, err = m.Get(ctx, "never")
	require.ErrorIs(t, err, inventory.ErrNotFound)
	_, err = m.Warm(ctx, "never")
	require.ErrorIs(t, err, inventory.ErrNotFound)
	_, err = m.Warm(ctx, "a", "")
	require.ErrorIs(t, err, inventory.ErrInvalidArgument)
	_, err = m.Reduce(ctx, "never", 1)
	require.ErrorIs(t, err, inventory.ErrNotFound)
}

// TestInitDropsOlderGeneration: moves of an older generation that were not
// yet synced do not count in the newer one.
func TestInitDropsOlderGeneration(t *testing.T) {
	onEngines(t, testenv.Redis(t), func(ctx context.Context, t *testing.T, e *env) {
		m := e.manager(t, WithChunk(4))
		const sku = "a"
		require.NoError(t, m.Init(ctx, sku, 10))
		m.reduceN(ctx, t, sku, 2, 3)
		require.NoError(t, m.Init(ctx, sku, 20))
		_, err := m.Reduce(ctx, sku, 5)
		require.NoError(t, err)
		assert.EqualValues(t, 5, m.drained(ctx, t, sku, 20).sold)
		v, err := m.Get(ctx, sku)
		require.NoError(t, err)
		assert.EqualValues(t, 15, v)
		assert.True(t, strings.HasPrefix(m.journalKey(sku), e.prefix+":j{"))
	})
}

// TestClusterSync sells SKUs of several Cluster slots and syncs them.
func TestClusterSync(t *testing.T) {
	c := testenv.RedisCluster(t)
	e := newEnv(t, c, testenv.MySQL(t))
	ctx := ctxT(t, time.Minute)
	m := e.manager(t, WithChunk(4), WithLowWater(1))
	skus := []string{"a", "b", "c", "d", "e", "f"}
	var wg sync.WaitGroup
	for _, sku := range skus {
		require.NoError(t, m.Init(ctx, sku, 30))
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					_, err := m.Reduce(ctx, sku, 2)
					if errors.Is(err, inventory.ErrInsufficientStock) {
						return
					}
					if !errors.Is(err, inventory.ErrContention) && !assert.NoError(t, err) {
						return
					}
				}
			}()
		}
	}
	runCtx, stop := context.WithCancel(ctx)
	ran := make(chan error)
	go func() { ran <- m.Run(runCtx) }()
	wg.Wait()
	require.NoError(t, m.Drain(ctx))
	stop()
	require.ErrorIs(t, <-ran, context.Canceled)
	for _, sku := range skus {
		s := m.totals(ctx, t, sku)
		assert.EqualValues(t, 30, s.sold, sku)
		checkDrained(t, s, 30)
	}
}
