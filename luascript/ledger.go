package luascript

import (
	"context"
	"fmt"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/redisledger"
	"github.com/stockkit/inventory/ledger"
)

// The movement ledger (WithLedger): each SKU's entries are a Redis stream,
// PREFIX{tag}:l:SKU, in the slot of its other keys, appended by the script
// that moves its stock (internal/redisledger's ledger.lua), so an entry
// is written if and only if its move took effect.

// noLedger starts every script of a Manager without a ledger: its "if
// ledger" tests are false, and it does nothing more than before.
const noLedger = redisledger.Off

// initLua is Init with a ledger: the SET and its entry in one script.
// KEYS[1] the stock key; ARGV[1] the stock, ARGV[2] the call's reference.
const initLua = `redis.call('SET', KEYS[1], ARGV[1])
ledger.add(KEYS[1], 'init', ARGV[1], ARGV[1], '', ARGV[2])
return 1
`

// scripts are the scripts a Manager runs: those without a ledger, shared
// by every such Manager, or those of its ledger.
type scripts struct {
	move, batch, orders, init *rediskeys.Script
}

var plainScripts = scripts{move: moveScript, batch: batchScript, orders: ordersScript}

// ledgerScripts returns the scripts that keep a ledger trimmed to about
// maxLen entries a SKU (0: every entry kept).
func ledgerScripts(maxLen int64) scripts {
	head := redisledger.Head(maxLen) + holdsLua
	return scripts{
		move:   rediskeys.NewScript(head + moveLua),
		batch:  rediskeys.NewScript(head + batchLua),
		orders: rediskeys.NewScript(head + ordersLua),
		init:   rediskeys.NewScript(head + initLua),
	}
}

// WithLedger makes the Manager keep a movement ledger (package
// [github.com/stockkit/inventory/ledger]): every move that took effect
// records one entry per SKU it moved in the SKU's Redis stream,
// PREFIX{tag}:l:SKU (in the slot of its stock), written by the script that
// moves the stock, and the Manager's Entries reads it. A merged batch
// writes one stream entry per SKU holding the entries of all its calls
// (consecutive unkeyed calls of one size with no reference as one run);
// a call on its own, one.
//
// maxLen is the retention, in stream entries per SKU: 0 keeps every entry
// (the stream grows for good, measured at about 7 bytes of Redis memory
// per ledger entry of merged calls without key or reference, which are
// kept as runs, 80 with a 20-byte key and a 16-byte reference; see
// docs/ledger.md); n > 0 trims each SKU's stream
// to about its last n stream entries, so at least its last n ledger
// entries (XADD MAXLEN ~ n: Redis drops only whole stream nodes, so it
// keeps up to a node more). A trimmed history still reads back, with its
// Held and Sold, but no longer starts at the SKU's first entry, so
// [ledger.Replay] and [ledger.Check], which start from zero stock, fail on
// it: check such a history from its first kept entry's After, or keep
// every entry. maxLen must be >= 0.
func WithLedger(maxLen int64) Option {
	return func(c *config) { c.ledgerOn, c.ledgerMaxLen = true, maxLen }
}

var _ ledger.Reader = (*Manager)(nil)

// stream is the key of the ledger of sku: PREFIX{tag}:l:SKU.
func (m *Manager) stream(sku string) string {
	return redisledger.Stream(rediskeys.Stock(m.prefix, sku))
}

// Entries implements [ledger.Reader]: a page of sku's stream after
// position after (internal/redisledger reads it: a stream entry of r
// records with id ms-seq holds positions ms*1,000,000 + seq-r+1 to
// ms*1,000,000 + seq, and an entry's Time is that millisecond on Redis's
// clock, or later when that clock went back: ids never do).
func (m *Manager) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return nil, fmt.Errorf("luascript: %w", err)
	}
	if err := ledger.CheckPage(after, limit); err != nil {
		return nil, err
	}
	if !m.ledgerOn {
		return nil, ledger.ErrNotKept
	}
	out, err := redisledger.Entries(ctx, m.client, m.stream(sku), sku, after, limit)
	if err != nil {
		return nil, fmt.Errorf("luascript: ledger of %q: %w", sku, err)
	}
	return out, nil
}

// initLedger is Init with a ledger.
func (m *Manager) initLedger(ctx context.Context, sku string, qty int64) error {
	_, acked, err := m.scripts.init.Run(ctx, m.client, m.replicas, m.replicaTimeout,
		[]string{rediskeys.Stock(m.prefix, sku)}, qty, driver.Ref(ctx))
	if err != nil {
		return err
	}
	return m.checkReplicas(acked)
}

// checkLedger returns the error of WithLedger's maxLen out of range.
func checkLedger(c *config) error {
	if c.ledgerOn {
		return redisledger.CheckMaxLen("luascript", c.ledgerMaxLen)
	}
	return nil
}
