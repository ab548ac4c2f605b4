package sqltest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

// BenchEngines runs BenchOrders on every engine, at 1 and 16 goroutines,
// 5 rounds of a second, on the manager newManager makes over tables of the
// benchmark's own.
func BenchEngines[M Manager](b *testing.B, newManager func(b testing.TB, db *sqlx.DB, schema sqlstore.Schema) M) {
	for _, e := range Engines {
		b.Run(e.Name, func(b *testing.B) {
			db := e.Open(b)
			m := newManager(b, db, Schema(b, db))
			for _, g := range []int{1, 16} {
				b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) { BenchOrders(b, m, g, 5, time.Second) })
			}
		})
	}
}

// OrderSides are the calls BenchOrders measures against a single-SKU
// Reduce of one unit: a Reserve of one unit then its Confirm (one op), and
// a 3-line ReduceLines of one unit per line.
var OrderSides = []string{"reserve+confirm", "reducelines-3"}

// BenchOrders measures OrderSides against the baseline, a single-SKU
// Reduce by the same manager, in the same run: rounds rounds in which each
// side runs for round at g goroutines over 64 SKUs, the sides' order
// turning each round. It reports, per side, the median ratio of its ops/s
// to the baseline's over the rounds ("x-reduce") with the lowest and
// highest ratio ("x-min", "x-max"), and the baseline's median ops/s.
// Run it with -benchtime 1x: one call does every round.
func BenchOrders(b *testing.B, m Manager, g, rounds int, round time.Duration) {
	ctx := context.Background()
	skus := make([]string, benchSKUs)
	p := testenv.Prefix()
	for i := range skus {
		skus[i] = fmt.Sprintf("%s-%d", p, i)
		require.NoError(b, m.Init(ctx, skus[i], inventory.MaxStock/2))
	}
	var ids atomic.Int64
	ops := map[string]func(rng *rand.Rand) error{
		"reduce": func(rng *rand.Rand) error {
			_, err := m.Reduce(ctx, skus[rng.IntN(len(skus))], 1)
			return err
		},
		"reserve+confirm": func(rng *rand.Rand) error {
			id := fmt.Sprintf("%s-h%d", p, ids.Add(1))
			if err := m.Reserve(ctx, id, []inventory.Line{{SKU: skus[rng.IntN(len(skus))], Qty: 1}}, time.Hour); err != nil {
				return err
			}
			return m.Confirm(ctx, id)
		},
		"reducelines-3": func(rng *rand.Rand) error {
			i := rng.Perm(len(skus))[:3]
			return m.ReduceLines(ctx, []inventory.Line{{SKU: skus[i[0]], Qty: 1}, {SKU: skus[i[1]], Qty: 1}, {SKU: skus[i[2]], Qty: 1}})
		},
	}
	// turn runs op at g goroutines for round and returns its ops/s.
	turn := func(op func(*rand.Rand) error) float64 {
		var n atomic.Int64
		var failed atomic.Value
		stop := time.Now().Add(round)
		var wg sync.WaitGroup
		for w := range g {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
				for time.Now().Before(stop) {
					if err := op(rng); err != nil {
						failed.Store(err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		return float64(n.Load()) / round.Seconds()
	}
	b.ResetTimer()
	names := append([]string{"reduce"}, OrderSides...)
	ratios := map[string][]float64{}
	var base []float64
	for r := range rounds {
		rate := map[string]float64{}
		order := slices.Clone(names)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			rate[name] = turn(ops[name])
		}
		base = append(base, rate["reduce"])
		for _, name := range OrderSides {
			ratios[name] = append(ratios[name], rate[name]/rate["reduce"])
		}
	}
	b.StopTimer()
	slices.Sort(base)
	b.ReportMetric(base[len(base)/2], "reduce-ops/s")
	for _, name := range OrderSides {
		rs := ratios[name]
		slices.Sort(rs)
		b.ReportMetric(rs[len(rs)/2], name+"-x-reduce")
		b.ReportMetric(rs[0], name+"-x-min")
		b.ReportMetric(rs[len(rs)-1], name+"-x-max")
		b.Logf("%s: %.3f x single-SKU Reduce (median of %d rounds, min %.3f, max %.3f); Reduce %.0f ops/s",
			name, rs[len(rs)/2], len(rs), rs[0], rs[len(rs)-1], base[len(base)/2])
	}
}

// benchSKUs is the number of SKUs BenchmarkOrders spreads its calls over.
const benchSKUs = 64
