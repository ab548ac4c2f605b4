package optimistic

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/sqlengine"
)

// outcome is one call's end as the sequential reference has it.
type outcome struct {
	kind int
	rem  int64
}

// sequential applies batch to stock s one call at a time, in order: the
// meaning a batch must keep.
func sequential(s int64, batch []*call, seen map[ledgerKey]sqlengine.Entry) []outcome {
	out := make([]outcome, len(batch))
	taken := map[ledgerKey]int64{}
	for i, c := range batch {
		k := ledgerKey{c.Req.dir, c.Req.key}
		if c.Req.key != "" {
			if rem, ok := taken[k]; ok {
				out[i] = outcome{dupCall, rem}
				continue
			}
			if e, ok := seen[k]; ok && !e.Expired {
				out[i] = outcome{dupRow, e.Remaining}
				continue
			}
		}
		switch {
		case c.Req.dir == driver.DirReduce && s >= c.Req.qty:
			s -= c.Req.qty
		case c.Req.dir == driver.DirReturn && c.Req.qty <= inventory.MaxStock-s:
			s += c.Req.qty
		default:
			out[i] = outcome{refused, s}
			continue
		}
		out[i] = outcome{took, s}
		if c.Req.key != "" {
			taken[k] = s
		}
	}
	return out
}

// planned is p's outcomes on stock s.
func planned(p plan, s int64) []outcome {
	out := make([]outcome, len(p.steps))
	for i, st := range p.steps {
		out[i] = outcome{st.kind, s + st.off}
		if st.kind == dupRow {
			out[i].rem = st.off
		}
	}
	return out
}

// TestPlan: on random batches of mixed calls (keys repeated in the batch
// and found in the ledger, stock near 0 and near MaxStock), a plan made on
// one stock gives, on every stock in its range lo..hi, exactly the
// outcomes and remainings of applying the calls one by one, and on every
// stock outside it some other outcome: its write can neither apply a batch
// that would now end otherwise nor lose to a move that changes no outcome.
// fits' plan is the one where every call takes effect.
func TestPlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 4))
	const maxS = inventory.MaxStock
	var stocks []int64
	for s := int64(0); s <= 24; s++ {
		stocks = append(stocks, s, maxS-s)
	}
	for n := range 20000 {
		batch := make([]*call, 1+rng.IntN(8))
		for i := range batch {
			r := req{qty: 1 + rng.Int64N(6), dir: driver.DirReduce}
			if rng.IntN(3) == 0 {
				r.dir = driver.DirReturn
			}
			if rng.IntN(3) == 0 {
				r.key = fmt.Sprint("k", rng.IntN(4))
			}
			batch[i] = &call{Req: r}
		}
		seen := map[ledgerKey]sqlengine.Entry{}
		for range rng.IntN(3) {
			k := ledgerKey{driver.DirReduce, fmt.Sprint("k", rng.IntN(4))}
			if rng.IntN(2) == 0 {
				k.dir = driver.DirReturn
			}
			seen[k] = sqlengine.Entry{Dir: k.dir, Key: k.key, Remaining: rng.Int64N(100), Expired: rng.IntN(3) == 0}
		}
		read := stocks[rng.IntN(len(stocks))]
		p := split(read, batch, seen)
		if p.lo > read || read > p.hi {
			t.Fatalf("case %d: the stock read, %d, is outside the plan's range %d..%d", n, read, p.lo, p.hi)
		}
		for _, s := range stocks {
			want, got := sequential(s, batch, seen), planned(p, s)
			if in := p.lo <= s && s <= p.hi; in != slices.Equal(want, got) {
				t.Fatalf("case %d (read %d, range %d..%d): on stock %d the calls one by one give %v, the plan %v", n, read, p.lo, p.hi, s, want, got)
			}
		}

		f, ok := fits(batch)
		repeat := false
		for i, c := range batch {
			for _, d := range batch[:i] {
				repeat = repeat || (c.Req.key != "" && c.Req.key == d.Req.key)
			}
		}
		if repeat {
			if ok {
				t.Fatalf("case %d: fits took a batch with a key twice", n)
			}
			continue
		}
		for _, s := range stocks {
			all := true
			for _, o := range sequential(s, batch, nil) {
				all = all && o.kind == took
			}
			if in := ok && f.lo <= s && s <= f.hi; in != all {
				t.Fatalf("case %d: on stock %d every call fits: %v; fits' range %d..%d (ok %v)", n, s, all, f.lo, f.hi, ok)
			}
			if all && !slices.Equal(planned(f, s), sequential(s, batch, nil)) {
				t.Fatalf("case %d: on stock %d fits' remainings differ", n, s)
			}
		}
	}
}
