package redisstore

import (
	"context"
	"fmt"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/redisledger"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/lockmgr"
)

// The movement ledger (package ledger), WithLedger: each SKU's entries are
// luascript's stream, PREFIX{tag}:l:SKU, in the slot of its stock,
// appended by the script of the write it records (stock.lua), in
// luascript's layout (internal/redisledger), so that a SKU moved by both
// keeps one history. Not to be confused with the idempotency keys, which
// this package's older docs and tests also call a ledger.

// WithLedger makes the Store keep the movement ledger of package
// [github.com/stockkit/inventory/ledger]: every write of stock (Init,
// CompareAndSet, Hold, Unhold) appends its entry to the SKU's Redis
// stream, PREFIX{tag}:l:SKU, in the same script as the write, so a lock
// strategy over the Store (a [lockmgr.Manager]) is a [ledger.Reader]. What
// an entry records (its kind, key, reference and hold id) is the
// [lockmgr.Note] the Manager passes in the write's ctx. The stream is
// luascript's (luascript.WithLedger), entry for entry.
//
// maxLen is the retention in stream entries per SKU, as for
// luascript.WithLedger: 0 keeps every entry; n > 0 trims each SKU's
// stream to about its last n entries (XADD MAXLEN ~ n), after which
// [ledger.Replay] and [ledger.Check] no longer start from the SKU's first
// entry and fail. maxLen must be >= 0.
func WithLedger(maxLen int64) Option {
	return func(c *config) { c.ledgerOn, c.ledgerMaxLen = true, maxLen }
}

var _ lockmgr.LedgerStore = (*Store)(nil)

// KeepsLedger implements [lockmgr.LedgerStore]: whether s was made with
// [WithLedger].
func (s *Store) KeepsLedger() bool { return s.ledgerOn }

// Entries implements [ledger.Reader]: a page of sku's stream. The error
// wraps [ledger.ErrNotKept] unless s was made with [WithLedger].
func (s *Store) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if err := ledger.CheckPage(after, limit); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if !s.ledgerOn {
		return nil, fmt.Errorf("redisstore: %w", ledger.ErrNotKept)
	}
	es, err := redisledger.Entries(ctx, s.client, redisledger.Stream(rediskeys.Stock(s.prefix, sku)), sku, after, limit)
	if err != nil {
		return nil, fmt.Errorf("redisstore: ledger of %q: %w", sku, err)
	}
	return es, nil
}

// entryArgs appends to args the entry of a write (stock.lua): the Note in
// ctx, or def when there is none.
func (s *Store) entryArgs(ctx context.Context, args []any, def lockmgr.Note) []any {
	n, ok := lockmgr.NoteOf(ctx)
	if !ok {
		n = def
	}
	return append(args, string(n.Kind), n.Key, n.Ref, n.Hold)
}
