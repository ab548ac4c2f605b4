package sqldialect

import (
	"errors"
	"slices"

	"github.com/stockkit/inventory"
)

// Step is one Reduce or Return of a batch of one SKU's calls, which
// optimistic and rowlock apply together (see [Tables.Apply]).
type Step struct {
	Qty int64
	Dir inventory.Direction
	Key string // "" for none
}

// Outcome is a step's answer: the stock after it, or its error with the
// stock it saw (a refusal) or the first call's remaining (a duplicate).
type Outcome struct {
	Remaining int64
	Err       error
}

// Keys returns the distinct keys of steps, in order.
func Keys(steps []Step) []string {
	var keys []string
	for _, s := range steps {
		if s.Key != "" && !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// ledgerKey is a key of a SKU's ledger.
type ledgerKey struct {
	dir inventory.Direction
	key string
}

// Apply computes the steps of sku in order from stock (the units of the
// expired holds the write releases included) and entries, the ledger rows
// of the steps' keys ([Tables.Entries]; nil if none was read): a step
// whose key has an unexpired row, or was used by an earlier step of the
// batch, is a duplicate, with that call's remaining; a step the stock does
// not let through is refused, with the stock then; any other moves the
// stock. It returns each step's outcome, the stock after the batch, the
// ledger rows to write ([Tables.RecordAll]), whether any step moved the
// stock, and whether any was refused for want of stock.
func (t *Tables) Apply(sku string, stock int64, entries []Entry, steps []Step) (out []Outcome, after int64, records []Entry, moved, short bool) {
	seen := make(map[ledgerKey]Entry, len(entries))
	for _, e := range entries {
		seen[ledgerKey{e.Dir, e.Key}] = e
	}
	out = make([]Outcome, len(steps))
	cur := stock
	for i, s := range steps {
		k := ledgerKey{s.Dir, s.Key}
		if e, ok := seen[k]; s.Key != "" && ok && !e.Expired {
			out[i] = Outcome{e.Remaining, t.Duplicate(sku, s.Dir, s.Key)}
			continue
		}
		if err := t.Check(sku, s.Dir, cur, s.Qty); err != nil {
			out[i] = Outcome{cur, err}
			short = short || errors.Is(err, inventory.ErrInsufficientStock)
			continue
		}
		if s.Dir == inventory.DirReduce {
			cur -= s.Qty
		} else {
			cur += s.Qty
		}
		out[i], moved = Outcome{Remaining: cur}, true
		if s.Key != "" {
			// Later steps with this key in the batch are its duplicates.
			expired := seen[k].Expired // an expired row to replace
			seen[k] = Entry{Dir: s.Dir, Key: s.Key, Remaining: cur}
			records = append(records, Entry{Dir: s.Dir, Key: s.Key, Remaining: cur, Expired: expired})
		}
	}
	return out, cur, records, moved, short
}
