package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/baseline"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/rowlock"
)

// refusalTTL is the staleness the sold-out comparisons allow.
const refusalTTL = 50 * time.Millisecond

// refuses is an Op that expects reduce to be refused for want of stock.
func refuses(reduce func(ctx context.Context) error) benchcmp.Op {
	return func(ctx context.Context, _ int, _ *rand.Rand) error {
		if err := reduce(ctx); !errors.Is(err, inventory.ErrInsufficientStock) {
			return fmt.Errorf("want a refusal, got %v", err)
		}
		return nil
	}
}

// BenchmarkSoldOut compares the refusals of a sold-out SKU (issue 13.3):
// a strategy with WithRefusals(50ms), which refuses in the process once
// its backend refused, against the bare call that asks the server every
// time (the check-and-DECRBY script; the conditional UPDATE, which matches
// no row), at 64 goroutines: luascript on a private Redis (privateRedis),
// optimistic and rowlock on each SQL engine.
func BenchmarkSoldOut(b *testing.B) {
	const g = 64
	ctx := context.Background()
	b.Run("redis", func(b *testing.B) {
		const prefix = "bench"
		client := privateRedis(b, g)
		m, err := luascript.New(client, luascript.WithPrefix(prefix), luascript.WithRefusals(refusalTTL))
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Init(ctx, "gone", 0); err != nil {
			b.Fatal(err)
		}
		bare := baseline.RedisScript
		if err := bare.Load(ctx, client).Err(); err != nil {
			b.Fatal(err)
		}
		key := []string{rediskeys.Stock(prefix, "gone")}
		benchcmp.Run(b, benchcmp.Case{Group: "sold out", Name: "luascript", Layout: "1 sold out", Goroutines: g,
			Strategy: benchcmp.Side{Name: "luascript, WithRefusals(50ms)", Op: refuses(func(ctx context.Context) error {
				_, err := m.Reduce(ctx, "gone", 1)
				return err
			})},
			Baseline: benchcmp.Side{Name: "bare check-and-DECRBY EVALSHA", Op: func(ctx context.Context, _ int, _ *rand.Rand) error {
				n, err := bare.EvalSha(ctx, client, key, 1).Int64()
				if err == nil && n != -1 {
					err = fmt.Errorf("the bare script sold (%d left)", n)
				}
				return err
			}},
		})
	})
	for _, e := range sqltest.Benched {
		b.Run(e.Name, func(b *testing.B) {
			s := openSQL(b, e)
			if err := s.store.Init(ctx, "gone", 0); err != nil {
				b.Fatal(err)
			}
			bare := benchcmp.Side{Name: "bare conditional UPDATE, " + s.name, Op: func(ctx context.Context, _ int, _ *rand.Rand) error {
				res, err := s.update.ExecContext(ctx, "gone")
				if err != nil {
					return err
				}
				if n, err := res.RowsAffected(); err != nil || n != 0 {
					return fmt.Errorf("bare UPDATE changed %d rows (%v) of a sold-out row", n, err)
				}
				return nil
			}}
			opt, err := optimistic.New(s.db, optimistic.WithSchema(s.schema), optimistic.WithRefusals(refusalTTL))
			if err != nil {
				b.Fatal(err)
			}
			rl, err := rowlock.New(s.db, rowlock.WithSchema(s.schema), rowlock.WithRefusals(refusalTTL))
			if err != nil {
				b.Fatal(err)
			}
			for _, m := range []struct {
				name string
				m    inventory.StockManager
			}{{"optimistic", opt}, {"rowlock", rl}} {
				benchcmp.Run(b, benchcmp.Case{Group: "sold out", Name: s.name + ", " + m.name, Layout: "1 sold out", Goroutines: g,
					Strategy: benchcmp.Side{Name: m.name + ", WithRefusals(50ms), " + s.name, Op: refuses(func(ctx context.Context) error {
						_, err := m.m.Reduce(ctx, "gone", 1)
						return err
					})},
					Baseline: bare,
				})
			}
		})
	}
}
