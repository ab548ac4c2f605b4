package sqltest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/stockkit/inventory"
)

// Mix tallies the calls of [HotRow].
type Mix struct {
	Calls      int64 // calls made
	Contention int64 // calls that ended in ErrContention
	Refused    int64 // calls refused for want of stock
	Reduced    int64 // units that successful Reduces took
	Returned   int64 // units that successful Returns gave back
}

// Add adds o's counts to x.
func (x *Mix) Add(o Mix) {
	x.Calls += o.Calls
	x.Contention += o.Contention
	x.Refused += o.Refused
	x.Reduced += o.Reduced
	x.Returned += o.Returned
}

// HotRow runs g goroutines of mixed calls on one SKU through m until d has
// passed, as one process of several selling one hot SKU would: Reduces of
// 1 to 3 units, one call in four a Return, one in ten with a key of its
// own. Started with more stock than the run takes, the stock drains to 0
// and stays about there, where calls are refused and the calls of other
// processes change the outcome of a batch between its read and its write.
// seed makes the goroutines' choices differ between processes and keys
// (prefix) distinct. A call error other than ErrContention or
// ErrInsufficientStock ends the run and is returned.
func HotRow(ctx context.Context, m inventory.StockManager, sku string, g int, d time.Duration, seed uint64, prefix string) (Mix, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	end := time.Now().Add(d)
	var (
		mu    sync.Mutex
		total Mix
		first error
		wg    sync.WaitGroup
	)
	for w := range g {
		wg.Go(func() {
			var x Mix
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			defer func() {
				mu.Lock()
				total.Add(x)
				mu.Unlock()
			}()
			for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
				qty := 1 + rng.Int64N(3)
				var opts []inventory.Option
				if rng.IntN(10) == 0 {
					opts = append(opts, inventory.WithKey(fmt.Sprintf("%s-%d-%d", prefix, w, i)))
				}
				ret := rng.IntN(4) == 0
				var err error
				if ret {
					_, err = m.Return(ctx, sku, qty, opts...)
				} else {
					_, err = m.Reduce(ctx, sku, qty, opts...)
				}
				x.Calls++
				switch {
				case err == nil && ret:
					x.Returned += qty
				case err == nil:
					x.Reduced += qty
				case errors.Is(err, inventory.ErrContention):
					x.Contention++
				case errors.Is(err, inventory.ErrInsufficientStock):
					x.Refused++
				default:
					mu.Lock()
					if first == nil {
						first = fmt.Errorf("%s of %d on %q: %w", map[bool]string{true: "Return", false: "Reduce"}[ret], qty, sku, err)
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return total, first
}
