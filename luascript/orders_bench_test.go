package luascript_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
)

// BenchmarkOrders measures the order calls beside a single-SKU Reduce
// (unkeyed, on the same SKUs) in the same run, at 16 goroutines, in
// alternating rounds: Reserve+Confirm of 1 and of 3 lines (one op is both
// calls) and an unkeyed 3-line ReduceLines. On the Cluster, 3 lines on
// three slots go through the multi-slot protocol; "oneslot" puts them in
// one slot (a Reserve's record still has its own slot). Metrics per case:
// the median ratio of throughputs (case / Reduce) and its min and max over
// the rounds.
func BenchmarkOrders(b *testing.B) {
	for _, srv := range []struct {
		name string
		c    func(b *testing.B) redis.UniversalClient
	}{
		{"standalone", func(b *testing.B) redis.UniversalClient { return testenv.Redis(b) }},
		{"cluster", func(b *testing.B) redis.UniversalClient { return testenv.RedisCluster(b) }},
	} {
		b.Run(srv.name, func(b *testing.B) {
			ctx := context.Background()
			c := srv.c(b)
			m := newBenchManager(b, c)
			spread := skus("bench-spread", 3, false)
			oneSlot := skus("bench-oneslot", 3, true)
			for _, s := range append(spread, oneSlot...) {
				if err := m.Init(ctx, s, inventory.MaxStock); err != nil {
					b.Fatal(err)
				}
			}
			var ids atomic.Int64
			reserveConfirm := func(ss []string) func(int) error {
				return func(i int) error {
					id := fmt.Sprint("h", ids.Add(1))
					ls := make([]inventory.Line, len(ss))
					for j, s := range ss {
						ls[j] = inventory.Line{SKU: s, Qty: 1}
					}
					if err := m.Reserve(ctx, id, ls, time.Minute); err != nil {
						return err
					}
					return m.Confirm(ctx, id)
				}
			}
			reduceLines := func(ss []string) func(int) error {
				return func(int) error {
					ls := make([]inventory.Line, len(ss))
					for j, s := range ss {
						ls[j] = inventory.Line{SKU: s, Qty: 1}
					}
					return m.ReduceLines(ctx, ls)
				}
			}
			reduce := func(i int) error {
				_, err := m.Reduce(ctx, spread[i%len(spread)], 1)
				return err
			}
			for _, tc := range []struct {
				name string
				op   func(int) error
			}{
				{"reserve+confirm/1-line", reserveConfirm(spread[:1])},
				{"reserve+confirm/3-line", reserveConfirm(spread)},
				{"reducelines/3-line", reduceLines(spread)},
				{"reducelines/3-line-oneslot", reduceLines(oneSlot)},
			} {
				b.Run(tc.name, func(b *testing.B) {
					const g, rounds = 16, 7
					var ratios []float64
					for range rounds {
						base, _ := run(b, g, b.N, reduce)
						ops, _ := run(b, g, b.N, tc.op)
						ratios = append(ratios, ops/base)
					}
					slices.Sort(ratios)
					b.ReportMetric(ratios[rounds/2], "x-reduce-median")
					b.ReportMetric(ratios[0], "x-reduce-min")
					b.ReportMetric(ratios[rounds-1], "x-reduce-max")
				})
			}
		})
	}
}

func newBenchManager(b *testing.B, c redis.UniversalClient) *luascript.Manager {
	m, err := luascript.New(c, luascript.WithPrefix(testenv.RedisPrefix(b, c)))
	if err != nil {
		b.Fatal(err)
	}
	return m
}
