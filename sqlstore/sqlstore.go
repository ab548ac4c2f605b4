// Package sqlstore keeps stock rows and the idempotency ledger in a SQL
// database through [github.com/jmoiron/sqlx], on MariaDB/MySQL, PostgreSQL
// and SQLite. The engine is chosen from db.DriverName(): "mysql"; "pgx" or
// "postgres"; "sqlite" (modernc.org/sqlite) or "sqlite3".
//
// A [Store] is the storage half of the lock strategies (redislock, redlock,
// zklock): they lock a SKU, then Read it and write it back with
// [Store.CompareAndSet]. The SQL strategies optimistic and rowlock use the
// same tables, so a service can move between all of them on the same data.
//
// # Tables
//
// The stock table holds one row per SKU: (sku, stock, version). The version
// moves on with every write, Init included. Its name and column names are
// configurable with [WithSchema], for a service that already has, say, a
// products(id, stock, version) table: the SKU column must be its primary
// key (or unique) and compare bytes exactly (MariaDB: VARBINARY or a _bin
// collation without PAD SPACE; PostgreSQL: COLLATE "C"); stock and version
// must be 64-bit integers.
//
// The ledger table holds (sku, dir, idem_key, remaining, expires_at), with
// primary key (sku, dir, idem_key) and an index on expires_at; expires_at
// is Unix milliseconds from the clock of the writing process. Expired
// entries count as absent and are pruned in bounded batches now and then.
//
// [Store.CreateTables] creates both tables, as named by the schema, if they
// are absent.
package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect"
)

// Schema names the stock table, its columns, the ledger table and the
// holds table. Zero fields take the defaults: table "stock" with columns
// "sku", "stock" and "version", ledger "stock_ledger", and holds the stock
// table's name (its first 57 bytes) followed by "_holds": "stock_holds".
// Each name must be a plain
// identifier: a letter or underscore, then letters, digits or underscores,
// at most 63 bytes. Names are quoted in SQL: reserved words are fine, and
// on PostgreSQL names are case-sensitive.
type Schema struct {
	Table   string // stock table
	SKU     string // SKU column: primary key, compared byte for byte
	Stock   string // stock column, a 64-bit integer
	Version string // version column, a 64-bit integer
	Ledger  string // idempotency ledger table
	Holds   string // holds table (orders: Reserve, Confirm, Cancel)
}

// Store keeps stock and idempotency keys in SQL. It is safe for concurrent
// use. Create it with [New].
type Store struct {
	t *sqldialect.Tables
}

type config struct {
	schema Schema
	ttl    time.Duration
}

// Option configures [New]. Options follow the rule of the root package
// (see [inventory] "Options"): a nil Option is ignored, and an out-of-range
// value makes New fail with an error wrapping [inventory.ErrInvalidArgument].
type Option func(*config)

// WithSchema names the tables and columns. The default is the zero Schema:
// every name its default.
func WithSchema(s Schema) Option { return func(c *config) { c.schema = s } }

// WithKeyTTL sets how long the ledger remembers an idempotency key; it must
// be at least a millisecond. The default is [inventory.DefaultKeyTTL].
func WithKeyTTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// New returns a Store over db. It validates the options and names, and
// chooses the dialect from db.DriverName(); it does no I/O. Errors wrap
// [inventory.ErrInvalidArgument].
func New(db *sqlx.DB, opts ...Option) (*Store, error) {
	c := config{ttl: inventory.DefaultKeyTTL}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	t, err := sqldialect.New(db, sqldialect.Config{Pkg: "sqlstore", Schema: sqldialect.Schema(c.schema), KeyTTL: c.ttl})
	if err != nil {
		return nil, err
	}
	return &Store{t: t}, nil
}

// CreateTables creates the stock table and the ledger, as named by the
// schema, if they are absent.
func (s *Store) CreateTables(ctx context.Context) error {
	return s.t.CreateTables(ctx)
}

// Init sets the stock of sku to qty, creating the SKU if absent. It does not
// forget idempotency keys.
func (s *Store) Init(ctx context.Context, sku string, qty int64) error {
	if err := inventory.ValidateInit(sku, qty); err != nil {
		return err
	}
	return s.t.Init(ctx, sku, qty)
}

// Get returns the stock of sku; an unknown SKU is [inventory.ErrNotFound].
func (s *Store) Get(ctx context.Context, sku string) (int64, error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return 0, err
	}
	return s.t.Get(ctx, sku)
}

// Read returns the stock and version of sku as last committed (one
// autocommit statement, never an older snapshot); an unknown SKU is
// [inventory.ErrNotFound].
func (s *Store) Read(ctx context.Context, sku string) (stock, version int64, err error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return 0, 0, err
	}
	return s.t.Read(ctx, s.t.DB, sku)
}

// Seen reports whether an unexpired ledger entry holds (sku, dir, key), and
// the remaining value recorded with it.
func (s *Store) Seen(ctx context.Context, sku string, dir inventory.Direction, key string) (remaining int64, found bool, err error) {
	if err := validateKey(sku, dir, key); err != nil {
		return 0, false, err
	}
	return s.t.Seen(ctx, s.t.DB, sku, dir, key)
}

// CompareAndSet atomically sets the stock of sku to newStock and moves its
// version on, if the version is still version; ok=false with a nil error
// means it had moved and nothing was written. When key is not empty the same
// transaction records (sku, dir, key) -> newStock in the ledger for the key
// TTL; if an unexpired entry already holds it, nothing is written and the
// error wraps [inventory.ErrDuplicate] (use Seen for the recorded value).
func (s *Store) CompareAndSet(ctx context.Context, sku string, version, newStock int64, dir inventory.Direction, key string) (ok bool, err error) {
	if err := inventory.ValidateSKU(sku); err != nil {
		return false, err
	}
	if newStock < 0 || newStock > inventory.MaxStock {
		return false, fmt.Errorf("sqlstore: %w: new stock %d outside 0..%d", inventory.ErrInvalidArgument, newStock, inventory.MaxStock)
	}
	if key == "" {
		return s.t.Set(ctx, s.t.DB, sku, version, newStock)
	}
	if err := validateKey(sku, dir, key); err != nil {
		return false, err
	}
	err = s.t.Tx(ctx, func(tx *sqlx.Tx) error {
		if ok, err = s.t.Set(ctx, tx, sku, version, newStock); err != nil || !ok {
			return err
		}
		dup, err := s.t.Record(ctx, tx, sku, dir, key, newStock)
		if err == nil && dup {
			err = s.t.Duplicate(sku, dir, key)
		}
		return err
	})
	if err != nil {
		return false, err
	}
	if ok {
		s.t.Tidy(ctx, 1)
	}
	return ok, nil
}

func validateKey(sku string, dir inventory.Direction, key string) error {
	if dir != inventory.DirReduce && dir != inventory.DirReturn {
		return fmt.Errorf("sqlstore: %w: direction %q", inventory.ErrInvalidArgument, dir)
	}
	_, err := inventory.ValidateMove(sku, 1, []inventory.Option{inventory.WithKey(key)})
	return err
}

var _ interface {
	Init(context.Context, string, int64) error
	Get(context.Context, string) (int64, error)
	Read(context.Context, string) (int64, int64, error)
	Seen(context.Context, string, inventory.Direction, string) (int64, bool, error)
	CompareAndSet(context.Context, string, int64, int64, inventory.Direction, string) (bool, error)
} = (*Store)(nil)
