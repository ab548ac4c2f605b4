package optimistic_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/refusals/refusalstest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

func newManager(t testing.TB, db *sqlx.DB, schema sqlstore.Schema, opts ...optimistic.Option) *optimistic.Manager {
	t.Helper()
	m, err := optimistic.New(db, append([]optimistic.Option{optimistic.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	return m
}

func TestConformance(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []optimistic.Option
	}{
		{"cas", nil},
		{"single", []optimistic.Option{optimistic.WithSingleStatement()}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
				schema := sqltest.Schema(t, db)
				inventorytest.Run(t, inventorytest.Config{
					RequireOrders: true,
					Timeout:       5 * time.Minute, // the carts on a loaded 2-core machine under -race: SQLite needs more than 2m
					NewManager: func(t *testing.T) inventory.StockManager {
						return newManager(t, db, sqltest.Harness(t, db, schema), mode.opts...)
					},
				})
			})
		})
	}
}

// TestProcesses runs several Managers, as separate processes would, on one
// hot SKU: their calls combine within a Manager and race by version between
// Managers, and must neither oversell nor lose an update, on the library's
// table and on one without its CHECK (stock >= 0), where only the
// Managers' own conditions keep the stock from going below zero.
func TestProcesses(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		for _, sc := range schemas {
			t.Run(sc.name, func(t *testing.T) { processes(t, db, sc.make(t, db)) })
		}
	})
}

func processes(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) {
	ctx := bounded(t, 2*time.Minute)
	ms := []*optimistic.Manager{
		newManager(t, db, schema), newManager(t, db, schema),
		newManager(t, db, schema, optimistic.WithSingleStatement()),
	}
	sku := testenv.Prefix()
	const stock, buyers = 150, 300
	require.NoError(t, ms[0].Init(ctx, sku, stock))
	var mu sync.Mutex
	var sold, refused, contention int
	var negative []int64 // remainings below zero
	var wg sync.WaitGroup
	for i := range buyers {
		wg.Go(func() {
			for {
				rem, err := ms[i%len(ms)].Reduce(ctx, sku, 1, inventory.WithKey(fmt.Sprint("buyer-", i)))
				mu.Lock()
				switch {
				case err == nil:
					sold++
					if rem < 0 {
						negative = append(negative, rem)
					}
				case errors.Is(err, inventory.ErrInsufficientStock):
					refused++
				case errors.Is(err, inventory.ErrContention):
					contention++
					mu.Unlock()
					continue
				default:
					assert.NoError(t, err)
				}
				mu.Unlock()
				return
			}
		})
	}
	wg.Wait()
	t.Logf("sold %d, refused %d, %d contention retries", sold, refused, contention)
	n, err := ms[1].Get(ctx, sku)
	require.NoError(t, err)
	if sold > stock || n < 0 || len(negative) > 0 {
		t.Fatalf("oversold: %d buyers bought one unit each of %d in stock, the stock is %d, and %d calls returned a remaining below zero: "+
			"a write that did not check the stock it moved", sold, stock, n, len(negative))
	}
	require.Equal(t, stock, sold)
	require.Equal(t, buyers-stock, refused)
	require.Zero(t, n)
}

// TestHotRow: four Managers (four processes) with default options, 16
// goroutines each, sell one hot SKU in rounds of 2 s with mixed calls
// (Reduces, Returns, some keyed; sqltest.HotRow) down to 0 and about there, where batches are refused in part and other
// Managers' writes land between a batch's read and its write: no call may
// end in ErrContention, and the stock left must be exact.
func TestHotRow(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		schema := sqltest.Schema(t, db)
		sku := testenv.Prefix()
		const initial = 2000
		ms := make([]*optimistic.Manager, 4)
		for i := range ms {
			ms[i] = newManager(t, db, schema)
		}
		require.NoError(t, ms[0].Init(ctx, sku, initial))
		var mu sync.Mutex
		var total sqltest.Mix
		// Rounds of 2 s until the stock has run out: a loaded machine
		// (load 30) once took only half the stock in one round.
		for round := 0; total.Refused == 0 && round < 20 && ctx.Err() == nil; round++ {
			var wg sync.WaitGroup
			for i, m := range ms {
				wg.Go(func() {
					x, err := sqltest.HotRow(ctx, m, sku, 16, 2*time.Second, uint64(round*len(ms)+i), fmt.Sprint("r", round, "m", i))
					assert.NoError(t, err)
					mu.Lock()
					total.Add(x)
					mu.Unlock()
				})
			}
			wg.Wait()
		}
		var writes, lost int64
		for _, m := range ms {
			w, l := m.Counts()
			writes, lost = writes+w, lost+l
		}
		t.Logf("%+v; %d writes after a read, %d lost", total, writes, lost)
		require.Zero(t, total.Contention, "calls that gave up")
		require.Positive(t, total.Refused, "the stock ran out: batches took the read path")
		n, err := ms[0].Get(ctx, sku)
		require.NoError(t, err)
		require.Equal(t, initial-total.Reduced+total.Returned, n)
	})
}

// TestSpread: 64 goroutines over 16 SKUs and an unknown one, unkeyed
// Reduces: on SQLite the moves of different SKUs that are ready together
// share a transaction (elsewhere none does); each SKU's successful calls
// return distinct remainings and its stock ends exact, and the unknown
// SKU's calls alone fail, with ErrNotFound.
func TestSpread(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		m := newManager(t, db, sqltest.Schema(t, db))
		p := testenv.Prefix()
		const skus, stock, calls = 16, 1000, 20
		for i := range skus {
			require.NoError(t, m.Init(ctx, fmt.Sprint(p, i), stock))
		}
		var mu sync.Mutex
		rems := map[string]map[int64]bool{}
		var wg sync.WaitGroup
		for w := range 64 {
			wg.Go(func() {
				for i := range calls {
					sku := fmt.Sprint(p, (w+i)%(skus+1)) // sku p+"16" is unknown
					rem, err := m.Reduce(ctx, sku, 1)
					if sku == fmt.Sprint(p, skus) {
						assert.ErrorIs(t, err, inventory.ErrNotFound)
						continue
					}
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					if rems[sku] == nil {
						rems[sku] = map[int64]bool{}
					}
					assert.False(t, rems[sku][rem], "%s: remaining %d twice", sku, rem)
					rems[sku][rem] = true
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for sku, rs := range rems {
			n, err := m.Get(ctx, sku)
			require.NoError(t, err)
			require.EqualValues(t, stock-len(rs), n, sku)
		}
		t.Logf("%d moves ran in a transaction with others", m.Together())
		if db.DriverName() == "sqlite" {
			require.Positive(t, m.Together())
		} else {
			require.Zero(t, m.Together())
		}
	})
}

// TestGivesUp: on the read path, with one attempt and a rival that keeps
// taking all the stock and giving it back, a call whose write finds the
// stock moved out of the range its outcome needs ends in ErrContention and
// changes nothing.
func TestGivesUp(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, time.Minute)
		schema := sqltest.Schema(t, db)
		m := newManager(t, db, schema, optimistic.WithMaxAttempts(1))
		optimistic.SetReadFirst(m)
		store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
		require.NoError(t, err)
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 1_000_000))

		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { // the rival: takes everything, gives it back, in a tight loop
			var holding int64
			for {
				select {
				case <-stop:
					if holding == 0 {
						return
					}
				default:
				}
				stock, v, err := store.Read(ctx, sku)
				if !assert.NoError(t, err) {
					return
				}
				next := int64(0)
				if holding > 0 {
					next = stock + holding
				}
				ok, err := store.CompareAndSet(ctx, sku, v, next, driver.DirReduce, "")
				if errors.Is(err, inventory.ErrContention) || (err == nil && !ok) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				if holding > 0 {
					holding = 0
				} else {
					holding = stock
				}
			}
		})
		var gaveUp, ok, refused int
		for range 200 {
			_, err := m.Reduce(ctx, sku, 1)
			switch {
			case errors.Is(err, inventory.ErrContention):
				gaveUp++
			case errors.Is(err, inventory.ErrInsufficientStock):
				refused++
			case assert.NoError(t, err):
				ok++
			}
		}
		close(stop)
		wg.Wait()
		t.Logf("%d calls gave up, %d took effect, %d refused", gaveUp, ok, refused)
		n, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 1_000_000-ok, n, "a call that gave up changed nothing")
		if db.DriverName() != "sqlite" { // SQLite writers take turns; the rival may never win
			require.Positive(t, gaveUp, "some calls lost every race")
		}
	})
}

func TestCustomSchema(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, time.Minute)
		p := testenv.Prefix()
		products, ledger := "products_"+p, "keys_"+p
		q, idType := `"`, map[string]string{"mysql": "VARBINARY(64)", "pgx": `VARCHAR(64) COLLATE "C"`, "sqlite": "TEXT"}[db.DriverName()]
		if db.DriverName() == "mysql" {
			q = "`"
		}
		_, err := db.ExecContext(ctx, "CREATE TABLE "+q+products+q+" (id "+idType+" PRIMARY KEY, stock BIGINT NOT NULL, version BIGINT NOT NULL)")
		require.NoError(t, err)
		sqltest.Drop(t, db, products, ledger)
		schema := sqlstore.Schema{Table: products, SKU: "id", Ledger: ledger}
		store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
		require.NoError(t, err)
		require.NoError(t, store.CreateTables(ctx))
		for _, m := range []*optimistic.Manager{newManager(t, db, schema), newManager(t, db, schema, optimistic.WithSingleStatement())} {
			require.NoError(t, m.Init(ctx, p, 5))
			rem, err := m.Reduce(ctx, p, 2, inventory.WithKey("k"))
			require.NoError(t, err)
			require.EqualValues(t, 3, rem)
			rem, err = m.Reduce(ctx, p, 2, inventory.WithKey("k"))
			require.ErrorIs(t, err, inventory.ErrDuplicate)
			require.EqualValues(t, 3, rem)
			rem, err = m.Return(ctx, p, 1)
			require.NoError(t, err)
			require.EqualValues(t, 4, rem)
			_, err = db.ExecContext(ctx, "DELETE FROM "+q+ledger+q)
			require.NoError(t, err)
		}
	})
}

// TestKeyExpiry: an expired key counts as absent and can be used again.
func TestKeyExpiry(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		schema := sqltest.Schema(t, db)
		sqltest.KeyExpiry(t, func(ttl time.Duration) inventory.StockManager {
			return newManager(t, db, schema, optimistic.WithKeyTTL(ttl))
		})
		sqltest.KeyExpiry(t, func(ttl time.Duration) inventory.StockManager {
			return newManager(t, db, schema, optimistic.WithKeyTTL(ttl), optimistic.WithSingleStatement())
		})
	})
}

// TestRivalsNoContention: two Managers (two processes) on one hot row, with
// default options, and before every write of either a rival that moves the
// row's version on. A batch that fits is one conditional UPDATE, which no
// version change makes fail: no call may end in ErrContention, and every
// call's remaining is exact (each unit taken leaves a distinct count; a
// repeated key gets its first call's).
func TestRivalsNoContention(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		schema := sqltest.Schema(t, db)
		store, err := sqlstore.New(db, sqlstore.WithSchema(schema))
		require.NoError(t, err)
		var bumps sync.Map // sku -> *int (guarded by mu)
		var mu sync.Mutex
		rival := func(sku string) {
			stock, v, err := store.Read(ctx, sku)
			if !assert.NoError(t, err) {
				return
			}
			ok, err := store.CompareAndSet(ctx, sku, v, stock, driver.DirReduce, "")
			if errors.Is(err, inventory.ErrContention) {
				return
			}
			if assert.NoError(t, err) && ok {
				n, _ := bumps.LoadOrStore(sku, new(int))
				mu.Lock()
				*n.(*int)++
				mu.Unlock()
			}
		}
		ms := []*optimistic.Manager{newManager(t, db, schema), newManager(t, db, schema)}
		for _, m := range ms {
			optimistic.SetBeforeCAS(m, rival)
		}
		sku := testenv.Prefix()
		const stock, workers, calls = 1000, 16, 20
		require.NoError(t, ms[0].Init(ctx, sku, stock))
		rems := map[int64]int{}
		keyRem := map[string]int64{}
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				for i := range calls {
					var opts []inventory.Option
					key := ""
					if i%2 == 1 {
						key = fmt.Sprintf("w%d-%d", w, i)
						opts = append(opts, inventory.WithKey(key))
					}
					rem, err := ms[w%len(ms)].Reduce(ctx, sku, 1, opts...)
					if !assert.NoError(t, err, "worker %d call %d", w, i) {
						return
					}
					mu.Lock()
					rems[rem]++
					if key != "" {
						keyRem[key] = rem
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		n, err := ms[0].Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, stock-workers*calls, n)
		require.Len(t, rems, workers*calls, "every call left a distinct remaining")
		for rem, k := range rems {
			require.Equal(t, 1, k, "remaining %d reported twice", rem)
			require.True(t, rem >= n && rem < stock, "remaining %d outside %d..%d", rem, n, stock-1)
		}
		b, ok := bumps.Load(sku)
		require.True(t, ok, "the rival ran")
		t.Logf("the rival moved the version %d times", *b.(*int))
		for key, want := range keyRem { // a repeat: ErrDuplicate with the first call's remaining
			rem, err := ms[1].Reduce(ctx, sku, 1, inventory.WithKey(key))
			require.ErrorIs(t, err, inventory.ErrDuplicate)
			require.Equal(t, want, rem)
		}
		n2, err := ms[1].Get(ctx, sku)
		require.NoError(t, err)
		require.Equal(t, n, n2)
	})
}

// TestRefusals checks WithRefusals on every engine (refusalstest.Run):
// stale refusals for at most the TTL, a Manager's own Return and Init end
// them, keyed calls always reach the database, and nothing is sold that
// the database did not sell.
func TestRefusals(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		schema := sqltest.Schema(t, db)
		const ttl = 300 * time.Millisecond
		refusalstest.Run(t, newManager(t, db, schema, optimistic.WithRefusals(ttl)), newManager(t, db, schema), testenv.Prefix(), ttl)
	})
}
