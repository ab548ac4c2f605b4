package sqlstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

func newStore(t *testing.T, db *sqlx.DB, opts ...sqlstore.Option) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.New(db, append([]sqlstore.Option{sqlstore.WithSchema(sqltest.Schema(t, db))}, opts...)...)
	require.NoError(t, err)
	return s
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestStore(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		s := newStore(t, db)
		sku := testenv.Prefix() + "/shoe"

		_, err := s.Get(ctx, sku)
		require.ErrorIs(t, err, inventory.ErrNotFound)
		_, _, err = s.Read(ctx, sku)
		require.ErrorIs(t, err, inventory.ErrNotFound)
		ok, err := s.CompareAndSet(ctx, sku, 1, 5, driver.DirReduce, "")
		require.NoError(t, err)
		require.False(t, ok, "CompareAndSet on an unknown SKU")
		_, err = s.Get(ctx, sku)
		require.ErrorIs(t, err, inventory.ErrNotFound, "a failed CompareAndSet creates nothing")

		require.NoError(t, s.Init(ctx, sku, 10))
		n, err := s.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 10, n)
		stock, v1, err := s.Read(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 10, stock)

		// Init moves the version on, so a CAS that read before it fails.
		require.NoError(t, s.Init(ctx, sku, 10))
		_, v2, err := s.Read(ctx, sku)
		require.NoError(t, err)
		require.Greater(t, v2, v1, "Init moves the version on")
		ok, err = s.CompareAndSet(ctx, sku, v1, 9, driver.DirReduce, "")
		require.NoError(t, err)
		require.False(t, ok, "stale version")

		ok, err = s.CompareAndSet(ctx, sku, v2, 9, driver.DirReduce, "")
		require.NoError(t, err)
		require.True(t, ok)
		stock, v3, err := s.Read(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 9, stock)
		require.Equal(t, v2+1, v3)

		// Keyed: recorded with the new stock, in the same step.
		_, found, err := s.Seen(ctx, sku, driver.DirReduce, "order-1")
		require.NoError(t, err)
		require.False(t, found)
		ok, err = s.CompareAndSet(ctx, sku, v3, 7, driver.DirReduce, "order-1")
		require.NoError(t, err)
		require.True(t, ok)
		rem, found, err := s.Seen(ctx, sku, driver.DirReduce, "order-1")
		require.NoError(t, err)
		require.True(t, found)
		require.EqualValues(t, 7, rem)

		// The same key again: nothing written, ErrDuplicate.
		ok, err = s.CompareAndSet(ctx, sku, v3+1, 5, driver.DirReduce, "order-1")
		require.ErrorIs(t, err, inventory.ErrDuplicate)
		require.False(t, ok)
		stock, v5, err := s.Read(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 7, stock, "a duplicate writes nothing")
		require.Equal(t, v3+1, v5, "a duplicate leaves the version")
		rem, _, err = s.Seen(ctx, sku, driver.DirReduce, "order-1")
		require.NoError(t, err)
		require.EqualValues(t, 7, rem, "the ledger keeps the first value")

		// A stale version with a fresh key records nothing.
		ok, err = s.CompareAndSet(ctx, sku, v3, 1, driver.DirReduce, "order-2")
		require.NoError(t, err)
		require.False(t, ok)
		_, found, err = s.Seen(ctx, sku, driver.DirReduce, "order-2")
		require.NoError(t, err)
		require.False(t, found, "a failed CompareAndSet does not use up its key")

		// Keys are per direction, per SKU and byte-exact.
		for _, k := range []struct {
			sku string
			dir driver.Direction
			key string
		}{
			{sku, driver.DirReturn, "order-1"}, {sku + " ", driver.DirReduce, "order-1"},
			{sku, driver.DirReduce, "order-1 "}, {sku, driver.DirReduce, "ORDER-1"},
		} {
			_, found, err = s.Seen(ctx, k.sku, k.dir, k.key)
			require.NoError(t, err)
			require.False(t, found, "%+v", k)
		}
	})
}

func TestKeyTTL(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		s := newStore(t, db, sqlstore.WithKeyTTL(200*time.Millisecond))
		sku := testenv.Prefix()
		require.NoError(t, s.Init(ctx, sku, 10))
		_, v, err := s.Read(ctx, sku)
		require.NoError(t, err)
		ok, err := s.CompareAndSet(ctx, sku, v, 9, driver.DirReduce, "k")
		require.NoError(t, err)
		require.True(t, ok)
		_, found, err := s.Seen(ctx, sku, driver.DirReduce, "k")
		require.NoError(t, err)
		require.True(t, found)

		time.Sleep(300 * time.Millisecond)
		_, found, err = s.Seen(ctx, sku, driver.DirReduce, "k")
		require.NoError(t, err)
		require.False(t, found, "an expired key counts as absent")
		ok, err = s.CompareAndSet(ctx, sku, v+1, 8, driver.DirReduce, "k")
		require.NoError(t, err, "an expired key can be used again")
		require.True(t, ok)
		rem, found, err := s.Seen(ctx, sku, driver.DirReduce, "k")
		require.NoError(t, err)
		require.True(t, found)
		require.EqualValues(t, 8, rem)
	})
}

// TestBytewiseSKUs checks the collation: SKUs that differ only in case,
// trailing spaces or Unicode normalisation are different rows.
func TestBytewiseSKUs(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		s := newStore(t, db)
		p := testenv.Prefix()
		skus := []string{"pad", "pad ", "PAD", "\u00e9", "e\u0301", "ß", "ss", "k", "\u212a"}
		for i, sku := range skus {
			require.NoError(t, s.Init(ctx, p+sku, int64(i)))
		}
		for i, sku := range skus {
			n, err := s.Get(ctx, p+sku)
			require.NoError(t, err)
			require.EqualValues(t, i, n, "%q", sku)
		}
	})
}

// TestCustomSchema maps the store onto an existing products(id, stock,
// version) table; CreateTables leaves it alone and adds the ledger.
func TestCustomSchema(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		p := testenv.Prefix()
		products, ledger := "products_"+p, "keys_"+p
		idType := map[string]string{"mysql": "VARBINARY(64)", "pgx": `VARCHAR(64) COLLATE "C"`, "sqlite": "TEXT"}[db.DriverName()]
		q := `"`
		if db.DriverName() == "mysql" {
			q = "`"
		}
		_, err := db.ExecContext(ctx, "CREATE TABLE "+q+products+q+" (id "+idType+" PRIMARY KEY, name VARCHAR(64), stock BIGINT NOT NULL, version BIGINT NOT NULL)")
		require.NoError(t, err)
		sqltest.Drop(t, db, products, ledger)
		_, err = db.ExecContext(ctx, db.Rebind("INSERT INTO "+q+products+q+" (id, name, stock, version) VALUES (?, 'boot', 4, 42)"), p)
		require.NoError(t, err)

		s, err := sqlstore.New(db, sqlstore.WithSchema(sqlstore.Schema{Table: products, SKU: "id", Ledger: ledger}))
		require.NoError(t, err)
		require.NoError(t, s.CreateTables(ctx))
		stock, v, err := s.Read(ctx, p)
		require.NoError(t, err)
		require.EqualValues(t, 4, stock)
		require.EqualValues(t, 42, v)
		ok, err := s.CompareAndSet(ctx, p, 42, 3, driver.DirReduce, "k")
		require.NoError(t, err)
		require.True(t, ok)
		var name string
		require.NoError(t, db.GetContext(ctx, &name, db.Rebind("SELECT name FROM "+q+products+q+" WHERE id = ?"), p))
		require.Equal(t, "boot", name, "other columns are untouched")
		require.NoError(t, s.Init(ctx, p+"-new", 7), "Init inserts into the existing table")
		n, err := s.Get(ctx, p+"-new")
		require.NoError(t, err)
		require.EqualValues(t, 7, n)
	})
}

func TestConcurrentCAS(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		ctx := ctx(t)
		s := newStore(t, db)
		sku := testenv.Prefix()
		const workers, each = 8, 10
		require.NoError(t, s.Init(ctx, sku, 1000))
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					for {
						stock, v, err := s.Read(ctx, sku)
						if !assert.NoError(t, err) {
							return
						}
						ok, err := s.CompareAndSet(ctx, sku, v, stock-1, driver.DirReduce, "")
						if errors.Is(err, inventory.ErrContention) {
							continue
						}
						if !assert.NoError(t, err) || ok {
							break
						}
					}
				}
			})
		}
		wg.Wait()
		n, err := s.Get(ctx, sku)
		require.NoError(t, err)
		require.EqualValues(t, 1000-workers*each, n, "no lost update")

		// One key, many callers: exactly one records it.
		var mu sync.Mutex
		wins, dups := 0, 0
		for range workers {
			wg.Go(func() {
				for {
					stock, v, err := s.Read(ctx, sku)
					if !assert.NoError(t, err) {
						return
					}
					ok, err := s.CompareAndSet(ctx, sku, v, stock-1, driver.DirReduce, "one")
					mu.Lock()
					switch {
					case errors.Is(err, inventory.ErrDuplicate):
						dups++
					case err == nil && ok:
						wins++
					case err == nil || errors.Is(err, inventory.ErrContention):
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
		require.Equal(t, 1, wins)
		require.Equal(t, workers-1, dups)
	})
}

func TestCancelledContext(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		s := newStore(t, db)
		sku := testenv.Prefix()
		require.NoError(t, s.Init(ctx(t), sku, 5))
		c, cancel := context.WithCancel(context.Background())
		cancel()
		require.ErrorIs(t, s.Init(c, sku, 1), context.Canceled)
		_, err := s.Get(c, sku)
		require.ErrorIs(t, err, context.Canceled)
		_, _, err = s.Read(c, sku)
		require.ErrorIs(t, err, context.Canceled)
		_, _, err = s.Seen(c, sku, driver.DirReduce, "k")
		require.ErrorIs(t, err, context.Canceled)
		_, err = s.CompareAndSet(c, sku, 1, 1, driver.DirReduce, "")
		require.ErrorIs(t, err, context.Canceled)
		_, err = s.CompareAndSet(c, sku, 1, 1, driver.DirReduce, "k")
		require.ErrorIs(t, err, context.Canceled)
		n, err := s.Get(ctx(t), sku)
		require.NoError(t, err)
		require.EqualValues(t, 5, n)
	})
}

func TestValidation(t *testing.T) {
	db := sqlx.NewDb(nil, "sqlite") // no I/O happens on any refused call
	for _, sc := range []sqlstore.Schema{
		{Table: "x; DROP TABLE y"}, {Table: "stock`"}, {Table: `st"ock`}, {SKU: "sku--"},
		{Stock: "1stock"}, {Version: "ver sion"}, {Ledger: "l'"}, {Table: "a.b"},
		{Table: "x\x00"}, {Table: "тов"}, {Ledger: "stock"}, {SKU: "stock"},
		{Table: string(make([]byte, 64))},
	} {
		_, err := sqlstore.New(db, sqlstore.WithSchema(sc))
		require.ErrorIs(t, err, inventory.ErrInvalidArgument, "%+v", sc)
	}
	_, err := sqlstore.New(sqlx.NewDb(nil, "oracle"))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "unknown driver")
	_, err = sqlstore.New(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "nil db")
	_, err = sqlstore.New(db, sqlstore.WithKeyTTL(0))
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "zero TTL")
	for _, name := range []string{"mysql", "pgx", "postgres", "sqlite", "sqlite3"} {
		_, err := sqlstore.New(sqlx.NewDb(nil, name), sqlstore.WithSchema(sqlstore.Schema{Table: "products", SKU: "id", Ledger: "_keys2"}))
		require.NoError(t, err, name)
	}

	s, err := sqlstore.New(db)
	require.NoError(t, err)
	ctx := context.Background()
	inv := inventory.ErrInvalidArgument
	require.ErrorIs(t, s.Init(ctx, "", 1), inv)
	require.ErrorIs(t, s.Init(ctx, "a", -1), inv)
	_, err = s.Get(ctx, "a\x00")
	require.ErrorIs(t, err, inv)
	_, _, err = s.Read(ctx, "a\xff")
	require.ErrorIs(t, err, inv)
	_, _, err = s.Seen(ctx, "a", "sideways", "k")
	require.ErrorIs(t, err, inv)
	_, _, err = s.Seen(ctx, "a", driver.DirReduce, "k\n")
	require.ErrorIs(t, err, inv)
	_, err = s.CompareAndSet(ctx, "a", 1, -1, driver.DirReduce, "")
	require.ErrorIs(t, err, inv)
	_, err = s.CompareAndSet(ctx, "a", 1, inventory.MaxStock+1, driver.DirReduce, "")
	require.ErrorIs(t, err, inv)
	_, err = s.CompareAndSet(ctx, "a", 1, 1, "", "k")
	require.ErrorIs(t, err, inv)
}
