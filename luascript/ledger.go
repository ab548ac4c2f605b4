package luascript

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/ledger"
)

// The movement ledger (WithLedger): each SKU's entries are a Redis stream,
// PREFIX{tag}:l:SKU, in the slot of its other keys, appended by the script
// that moves its stock (ledger.lua), so an entry is written if and only if
// its move took effect.

//go:embed ledger.lua
var ledgerLua string

// noLedger starts every script of a Manager without a ledger: its "if
// ledger" tests are false, and it does nothing more than before.
const noLedger = "local ledger\n"

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
	head := "local MAXLEN = " + strconv.FormatInt(maxLen, 10) + "\n" + ledgerLua + holdsLua
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
// writes one stream entry per SKU holding the entries of all its calls;
// a call on its own, one.
//
// maxLen is the retention, in stream entries per SKU: 0 keeps every entry
// (the stream grows for good, measured at about 40 bytes of Redis memory
// per ledger entry without key or reference, 80 with a 20-byte key and a
// 16-byte reference; see docs/ledger.md); n > 0 trims each SKU's stream
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
	s := rediskeys.Stock(m.prefix, sku)
	i := strings.IndexByte(s, '}')
	return s[:i+1] + ":l:" + s[i+4:]
}

// Positions: the record at seq of millisecond ms (ledger.lua) is position
// ms*posSeqs + seq.
const posSeqs = 1_000_000

// Entries implements [ledger.Reader]: a page of sku's stream after
// position after. A stream entry of r records with id ms-seq (ledger.lua)
// holds positions ms*1,000,000 + seq-r+1 to ms*1,000,000 + seq, and an
// entry's Time is that millisecond (Redis's clock, or later when that
// clock went back: ids never do).
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
	start := "-" // the first stream entry that may hold a position past after
	if after > 0 {
		start = strconv.FormatInt(after/posSeqs, 10) + "-" + strconv.FormatInt(after%posSeqs, 10)
	}
	out := make([]ledger.Entry, 0, min(limit, 64))
	for {
		want := limit - len(out)
		msgs, err := m.client.XRangeN(ctx, m.stream(sku), start, "+", int64(want)).Result()
		if err != nil {
			return nil, fmt.Errorf("luascript: ledger of %q: %w", sku, err)
		}
		for _, msg := range msgs {
			if out, err = appendEntries(out, sku, msg, after, limit); err != nil {
				return nil, fmt.Errorf("luascript: ledger of %q: %w", sku, err)
			}
		}
		if len(out) == limit || len(msgs) < want {
			return out, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// appendEntries appends to out, up to limit, the records of stream entry
// msg of sku's ledger (ledger.lua) past position after.
func appendEntries(out []ledger.Entry, sku string, msg redis.XMessage, after int64, limit int) ([]ledger.Entry, error) {
	ms, seq, ok := strings.Cut(msg.ID, "-")
	t, err1 := strconv.ParseInt(ms, 10, 64)
	n, err2 := strconv.ParseInt(seq, 10, 64)
	v, _ := msg.Values["e"].(string)
	es, err := records(v)
	r := int64(len(es))
	switch {
	case !ok || err1 != nil || err2 != nil || n >= posSeqs || n+1 < r || t > (1<<63-1)/posSeqs-1:
		return out, fmt.Errorf("stream entry id %s is no ledger position", msg.ID)
	case err != nil:
		return out, fmt.Errorf("stream entry %s: %w", msg.ID, err)
	}
	for i, e := range es {
		pos := t*posSeqs + n - r + 1 + int64(i)
		if pos <= after || len(out) == limit {
			continue
		}
		e.SKU, e.Pos, e.Time = sku, pos, time.UnixMilli(t)
		out = append(out, e)
	}
	return out, nil
}

// records decodes the field of a stream entry (ledger.lua): the line of
// the counters, then four lines a record.
func records(v string) ([]ledger.Entry, error) {
	lines := strings.Split(v, "\n")
	if len(lines)%4 != 1 {
		return nil, fmt.Errorf("%d lines", len(lines))
	}
	es := make([]ledger.Entry, len(lines)/4)
	for i := range es {
		var err error
		if es[i], err = record(lines[1+4*i : 5+4*i]); err != nil {
			return nil, err
		}
	}
	// Held and Sold: after the last record, and back from there.
	var held, sold int64
	if _, err := fmt.Sscanf(lines[0], "%d %d", &held, &sold); err != nil {
		return nil, fmt.Errorf("counters %q: %w", lines[0], err)
	}
	for i := len(es) - 1; i >= 0; i-- {
		es[i].After.Held, es[i].After.Sold = held, sold
		moved, err := ledger.Stock{}.Apply(es[i].Kind, es[i].Units)
		if err != nil {
			return nil, err
		}
		held, sold = held-moved.Held, sold-moved.Sold // applied to zero: its moves of Held and Sold
	}
	return es, nil
}

// record decodes the four lines of a record (ledger.lua): all but Held
// and Sold.
func record(lines []string) (ledger.Entry, error) {
	var e ledger.Entry
	nums := strings.Fields(lines[0])
	if len(nums) != 3 {
		return e, fmt.Errorf("record %q", lines[0])
	}
	var vals [2]int64
	for i := range vals {
		x, err := strconv.ParseInt(nums[i+1], 10, 64)
		if err != nil {
			return e, fmt.Errorf("record %q: %w", lines[0], err)
		}
		vals[i] = x
	}
	e.Kind, e.Units, e.After.Available = ledger.Kind(nums[0]), vals[0], vals[1]
	e.Key, e.Ref, e.Hold = lines[1], lines[2], lines[3]
	return e, nil
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
	if c.ledgerOn && c.ledgerMaxLen < 0 {
		return fmt.Errorf("%w: luascript: WithLedger(%d): want >= 0", inventory.ErrInvalidArgument, c.ledgerMaxLen)
	}
	return nil
}
