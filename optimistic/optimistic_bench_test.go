package optimistic_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

type manager struct{ *optimistic.Manager }

func (m manager) Take(ctx context.Context, sku string) error {
	_, err := m.Reduce(ctx, sku, 1)
	return err
}

func variant(name string, opts ...optimistic.Option) sqltest.Variant {
	return sqltest.Variant{Name: name, New: func(tb testing.TB, db *sqlx.DB, schema sqlstore.Schema) sqltest.Taker {
		return manager{newManager(tb, db, schema, opts...)}
	}}
}

// procs spreads the calls over several Managers, as several processes
// would: their calls combine only within each Manager.
type procs []*optimistic.Manager

func (p procs) Take(ctx context.Context, sku string) error {
	_, err := p[rand.IntN(len(p))].Reduce(ctx, sku, 1)
	return err
}

func (p procs) Counts() (attempts, conflicts int64) {
	for _, m := range p {
		a, c := m.Counts()
		attempts, conflicts = attempts+a, conflicts+c
	}
	return attempts, conflicts
}

// naive is the textbook version CAS: read, write if the version held,
// otherwise back off (decorrelated jitter, as optimistic does) and read
// again; every goroutine for itself.
type naive struct {
	store               *sqlstore.Store
	attempts, conflicts atomic.Int64
}

func (n *naive) Counts() (int64, int64) { return n.attempts.Load(), n.conflicts.Load() }

func (n *naive) Take(ctx context.Context, sku string) error {
	const base, ceiling = time.Millisecond, 100 * time.Millisecond
	pause := base
	for {
		stock, v, err := n.store.Read(ctx, sku)
		if err != nil {
			return err
		}
		if stock < 1 {
			return inventory.ErrInsufficientStock
		}
		n.attempts.Add(1)
		ok, err := n.store.CompareAndSet(ctx, sku, v, stock-1, inventory.DirReduce, "")
		if ok || (err != nil && !errors.Is(err, inventory.ErrContention)) {
			return err
		}
		n.conflicts.Add(1)
		pause = min(ceiling, base+rand.N(max(3*pause, base+1)-base))
		time.Sleep(pause)
	}
}

// BenchmarkReduce compares, per engine, layout and concurrency, with the
// bare conditional UPDATE as baseline:
//   - naive-cas: version CAS, each goroutine for itself;
//   - gate: optimistic with calls of one SKU taking turns, one write each;
//   - cas: optimistic as shipped, queued calls combined into one write;
//   - cas-4procs: the same split over four Managers, as four processes;
//   - single: optimistic.WithSingleStatement.
func BenchmarkReduce(b *testing.B) {
	sqltest.Bench(b,
		sqltest.Variant{Name: "naive-cas", New: func(tb testing.TB, db *sqlx.DB, schema sqlstore.Schema) sqltest.Taker {
			s, err := sqlstore.New(db, sqlstore.WithSchema(schema))
			require.NoError(tb, err)
			return &naive{store: s}
		}},
		variant("gate", optimistic.WithMaxBatch(1)),
		variant("cas"),
		sqltest.Variant{Name: "cas-4procs", New: func(tb testing.TB, db *sqlx.DB, schema sqlstore.Schema) sqltest.Taker {
			return procs{newManager(tb, db, schema), newManager(tb, db, schema), newManager(tb, db, schema), newManager(tb, db, schema)}
		}},
		variant("single", optimistic.WithSingleStatement()),
	)
}
