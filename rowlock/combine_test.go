package rowlock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// outcome is one call of a combining test and what it got.
type outcome struct {
	dir driver.Direction
	qty int64
	key string
	rem int64
	err error
}

// TestCombineMixed: many goroutines on one SKU, Reduce and Return mixed,
// some keyed with keys that repeat: the calls combine (fewer transactions
// than calls), and every caller gets its own exact answer. The successful
// calls chain from the initial stock to the final one (one serial order
// explains every remaining), a refusal saw too little stock, a duplicate
// reports the remaining of its key's one success.
func TestCombineMixed(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		m := newManager(t, db, sqltest.Schema(t, db), rowlock.WithLockTimeout(30*time.Second))
		var txs atomic.Int64
		rowlock.SetAfterLock(m, func([]string) { txs.Add(1) })
		sku := testenv.Prefix()
		const initial, workers, calls = 60, 48, 8
		require.NoError(t, m.Init(ctx, sku, initial))

		// The first call that fails unexpectedly ends the test at once,
		// saying why, rather than leave the rest to wait out ctx.
		ctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		results := make([][]outcome, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 13))
				for range calls {
					if ctx.Err() != nil {
						return
					}
					o := outcome{dir: driver.DirReduce, qty: 1 + rng.Int64N(4)}
					if rng.IntN(3) == 0 {
						o.dir, o.qty = driver.DirReturn, 1+rng.Int64N(3)
					}
					var opts []inventory.Option
					if rng.IntN(2) == 0 {
						o.key = fmt.Sprint("k", rng.IntN(40)) // shared by the workers: duplicates
						opts = append(opts, inventory.WithKey(o.key))
					}
					if o.dir == driver.DirReduce {
						o.rem, o.err = m.Reduce(ctx, sku, o.qty, opts...)
					} else {
						o.rem, o.err = m.Return(ctx, sku, o.qty, opts...)
					}
					results[w] = append(results[w], o)
					if o.err != nil && !errors.Is(o.err, inventory.ErrInsufficientStock) && !errors.Is(o.err, inventory.ErrDuplicate) {
						stop(fmt.Errorf("%s of %d with key %q failed: %w", o.dir, o.qty, o.key, o.err))
						return
					}
				}
			})
		}
		wg.Wait()
		if err := context.Cause(ctx); err != nil {
			t.Fatalf("a call failed unexpectedly (with a 30s lock timeout and no other writer, every call must take effect or be refused): %v", err)
		}
		final, err := m.Get(ctx, sku)
		require.NoError(t, err)

		type ledgerKey struct {
			dir driver.Direction
			key string
		}
		first := map[ledgerKey]int64{} // the remaining of each key's success
		balance := map[int64]int{}     // per stock value: moves out of it - moves into it
		var moved, ok, refused, dups int64
		for _, rs := range results {
			for _, o := range rs {
				if o.err != nil || o.key == "" {
					continue
				}
				k := ledgerKey{o.dir, o.key}
				_, twice := first[k]
				require.False(t, twice, "key %v succeeded twice", k)
				first[k] = o.rem
			}
		}
		for _, rs := range results {
			for _, o := range rs {
				switch {
				case o.err == nil:
					ok++
					prev := o.rem + o.qty
					if o.dir == driver.DirReturn {
						prev = o.rem - o.qty
						moved -= o.qty
					} else {
						moved += o.qty
					}
					balance[prev]++
					balance[o.rem]--
				case errors.Is(o.err, inventory.ErrInsufficientStock):
					refused++
					require.Equal(t, driver.DirReduce, o.dir)
					require.Less(t, o.rem, o.qty, "refused with enough stock: %v", o.err)
					require.GreaterOrEqual(t, o.rem, int64(0))
				case errors.Is(o.err, inventory.ErrDuplicate):
					dups++
					rem, found := first[ledgerKey{o.dir, o.key}]
					require.True(t, found, "a duplicate of a key that never succeeded (its key was recorded by a call that did not take effect: outside its transaction?): %v", o.err)
					require.Equal(t, rem, o.rem, "a duplicate reports its key's first remaining")
				default:
					require.NoError(t, o.err)
				}
			}
		}
		require.Equal(t, initial-final, moved, "initial - final = reduced - returned")
		if initial != final {
			balance[initial]--
			balance[final]++
		}
		for v, b := range balance {
			require.Zero(t, b, "no serial order of the successful calls passes through stock %d as they report", v)
		}
		t.Logf("%d calls: %d took effect, %d refused, %d duplicates, in %d transactions; stock %d -> %d",
			workers*calls, ok, refused, dups, txs.Load(), initial, final)
		require.Less(t, txs.Load(), ok, "the calls combined")
	})
}

// TestCombineLockTimeout: while another transaction holds the row, a
// batch of calls waits for the lock together and gives up together: every
// call returns ErrContention, nothing changed, and no key was used.
func TestCombineLockTimeout(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, time.Minute)
		schema := sqltest.Schema(t, db)
		wait := 500 * time.Millisecond
		if db.DriverName() == "mysql" {
			wait = time.Second // whole seconds
		}
		m := newManager(t, db, schema, rowlock.WithLockTimeout(wait))
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 10))
		release := holdLock(t, db, schema, sku)

		const n = 8
		errs := make([]error, n)
		var wg sync.WaitGroup
		call := func(i int) {
			wg.Go(func() {
				if i%2 == 0 {
					_, errs[i] = m.Reduce(ctx, sku, 1, inventory.WithKey(fmt.Sprint("k", i)))
				} else {
					_, errs[i] = m.Return(ctx, sku, 1)
				}
			})
		}
		// An unkeyed call first, alone: its batch waits for the lock; the
		// others, started after it, queue behind it. (Started together, the
		// first batch could take every unkeyed call, while on SQLite the
		// keyed calls' prechecks wait for the same database lock, so no two
		// were ever queued at once: 2 of 25 runs failed so.)
		call(1)
		time.Sleep(100 * time.Millisecond)
		for i := range n {
			if i != 1 {
				call(i)
			}
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		queued := 0 // the most calls seen queued at once: a batch of them followed
		for wait := true; wait; {
			select {
			case <-done:
				wait = false
			case <-time.After(time.Millisecond):
				queued = max(queued, rowlock.Queued(m, sku))
			}
		}
		release()
		require.GreaterOrEqual(t, queued, 2, "calls waited together")
		for i, err := range errs {
			require.ErrorIs(t, err, inventory.ErrContention, "call %d", i)
		}
		got, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 10, got, "nothing changed")
		rem, err := m.Reduce(ctx, sku, 1, inventory.WithKey("k2"))
		require.NoError(t, err, "the keys of the calls that gave up are unused")
		require.EqualValues(t, 9, rem)
	})
}

// boom makes every INSERT of key "boom" into schema's ledger fail, with a
// trigger: a batch with such a key fails after it wrote the stock.
func boom(t *testing.T, db *sqlx.DB, schema sqlstore.Schema) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "boom_" + testenv.Prefix()
	var stmts []string
	switch db.DriverName() {
	case "mysql":
		stmts = []string{"CREATE TRIGGER `" + name + "` BEFORE INSERT ON `" + schema.Ledger + "` FOR EACH ROW " +
			"IF NEW.idem_key = 'boom' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'; END IF"}
	case "pgx":
		stmts = []string{`CREATE FUNCTION "` + name + `"() RETURNS trigger LANGUAGE plpgsql AS $$
			BEGIN
				IF NEW.idem_key = 'boom' THEN RAISE EXCEPTION 'boom'; END IF;
				RETURN NEW;
			END $$`,
			`CREATE TRIGGER "` + name + `" BEFORE INSERT ON "` + schema.Ledger + `" FOR EACH ROW EXECUTE FUNCTION "` + name + `"()`}
		t.Cleanup(func() { _, _ = db.Exec(`DROP FUNCTION IF EXISTS "` + name + `"() CASCADE`) })
	default:
		stmts = []string{`CREATE TRIGGER "` + name + `" BEFORE INSERT ON "` + schema.Ledger + `"
			WHEN NEW.idem_key = 'boom' BEGIN SELECT RAISE(ABORT, 'boom'); END`}
	}
	for _, q := range stmts {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
}

// TestCombineFailsMidway: a batch whose transaction fails after writing the
// stock (its ledger INSERT fails) changes nothing and returns the error to
// every call in it; their keys stay unused. The call before it, and each
// batch, is one transaction.
func TestCombineFailsMidway(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		schema := sqltest.Schema(t, db)
		boom(t, db, schema)
		m := newManager(t, db, schema)
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 100))

		locked, hold := make(chan struct{}), make(chan struct{})
		var txs atomic.Int64
		rowlock.SetAfterLock(m, func([]string) {
			if txs.Add(1) == 1 {
				close(locked)
				<-hold
			}
		})
		var wg sync.WaitGroup
		var errA error
		wg.Go(func() { _, errA = m.Reduce(ctx, sku, 1) })
		<-locked // the first call holds the row: the others queue

		const n = 9
		errs := make([]error, n)
		keys := make([]string, n)
		for i := range n {
			keys[i] = fmt.Sprint("k", i)
			if i == n/2 {
				keys[i] = "boom"
			}
			wg.Go(func() {
				if i%3 == 2 {
					_, errs[i] = m.Return(ctx, sku, 2, inventory.WithKey(keys[i]))
				} else {
					_, errs[i] = m.Reduce(ctx, sku, 3, inventory.WithKey(keys[i]))
				}
			})
		}
		require.Eventually(t, func() bool { return rowlock.Queued(m, sku) == n }, 10*time.Second, time.Millisecond)
		close(hold)
		wg.Wait()

		require.NoError(t, errA)
		require.EqualValues(t, 2, txs.Load(), "the first call, then one batch of the others")
		for i, err := range errs {
			require.Error(t, err, "call %d", i)
			require.ErrorContains(t, err, "boom", "call %d", i)
			for _, s := range []error{inventory.ErrInsufficientStock, inventory.ErrDuplicate, inventory.ErrContention, inventory.ErrNotFound} {
				require.NotErrorIs(t, err, s, "call %d", i)
			}
		}
		got, err := m.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 99, got, "the failed batch changed nothing")
		for i, k := range keys {
			if k == "boom" {
				continue
			}
			var err error
			if i%3 == 2 {
				_, err = m.Return(ctx, sku, 2, inventory.WithKey(k))
			} else {
				_, err = m.Reduce(ctx, sku, 3, inventory.WithKey(k))
			}
			require.NoError(t, err, "key %s is unused", k)
		}
	})
}

// TestLoneCall: a call alone is one transaction, as before calls combined;
// on MariaDB, whose session counts the statements it runs, with as many
// statements as the uncombined call (rowlock.MoveAlone) makes.
func TestLoneCall(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := bounded(t, 30*time.Second)
		schema := sqltest.Schema(t, db)
		m := newManager(t, db, schema)
		var txs atomic.Int64
		rowlock.SetAfterLock(m, func([]string) { txs.Add(1) })
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 100))
		for i, opts := range [][]inventory.Option{nil, {inventory.WithKey("a")}, nil, {inventory.WithKey("b")}} {
			_, err := m.Reduce(ctx, sku, 1, opts...)
			require.NoError(t, err)
			require.EqualValues(t, i+1, txs.Load(), "call %d", i)
		}
	})
	t.Run("statements", func(t *testing.T) {
		// On a pool of one connection, a call that needs a second one (a
		// statement outside its transaction) would wait for ever: the
		// deadline ends it.
		ctx := bounded(t, 10*time.Second)
		db := sqltest.Open(t, "mariadb")
		db.SetMaxOpenConns(1) // one session: its counter counts every statement
		schema := sqltest.Schema(t, db)
		m := newManager(t, db, schema)
		sku := testenv.Prefix()
		require.NoError(t, m.Init(ctx, sku, 100))
		questions := func() int64 {
			var name string
			var n int64
			require.NoError(t, db.QueryRowxContext(ctx, "SHOW SESSION STATUS LIKE 'Questions'").Scan(&name, &n))
			return n
		}
		// count runs call and returns how many statements it sent.
		count := func(call func() error) int64 {
			before := questions()
			require.NoError(t, call())
			return questions() - before - 1 // the SHOW itself
		}
		for i, key := range []string{"", "k"} {
			// Each first: the statements prepared on the session.
			_, err := m.Reduce(ctx, sku, 1, inventory.WithKey(fmt.Sprint(key, "w", i)))
			require.NoError(t, err)
			alone := count(func() error {
				k := key
				if k != "" {
					k = fmt.Sprint(key, "a", i)
				}
				_, err := rowlock.MoveAlone(ctx, m, sku, 1, driver.DirReduce, k)
				return err
			})
			combined := count(func() error {
				var opts []inventory.Option
				if key != "" {
					opts = append(opts, inventory.WithKey(fmt.Sprint(key, "c", i)))
				}
				_, err := m.Reduce(ctx, sku, 1, opts...)
				return err
			})
			t.Logf("key %q: %d statements alone, %d combined", key, alone, combined)
			assert.LessOrEqual(t, combined, alone, "key %q", key)
		}
	})
}
