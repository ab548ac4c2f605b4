// Package redisledger is the movement ledger (package ledger) of the
// strategies that keep stock in Redis: each SKU's entries are a Redis
// stream, PREFIX{tag}:l:SKU, in the slot of its stock key, appended by the
// Lua script that moves the stock (ledger.lua, put at the head of the
// script by [Head]), so an entry is written if and only if its move took
// effect. redisstore writes it; its layout is luascript's (docs/ledger.md,
// "luascript: a stream per SKU"), so that a SKU moved by both keeps one
// history.
package redisledger

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/ledger"
)

//go:embed ledger.lua
var ledgerLua string

// Off starts every script that keeps no ledger: its "if ledger" tests are
// false, and it does nothing more than without them.
const Off = "local ledger\n"

// Head is what starts every script that keeps a ledger trimmed to about
// maxLen stream entries a SKU (0: every entry kept): it defines ledger.add
// (see ledger.lua).
func Head(maxLen int64) string {
	return "local MAXLEN = " + strconv.FormatInt(maxLen, 10) + "\n" + ledgerLua
}

// CheckMaxLen returns the error of pkg's WithLedger(maxLen) when maxLen is
// out of range (below 0), wrapping [inventory.ErrInvalidArgument].
func CheckMaxLen(pkg string, maxLen int64) error {
	if maxLen < 0 {
		return fmt.Errorf("%w: %s: WithLedger(%d): want >= 0", inventory.ErrInvalidArgument, pkg, maxLen)
	}
	return nil
}

// Stream is the key of the ledger of the SKU whose stock key is stock
// (PREFIX{tag}:s:SKU): PREFIX{tag}:l:SKU.
func Stream(stock string) string {
	i := strings.IndexByte(stock, '}')
	return stock[:i+1] + ":l:" + stock[i+4:]
}

// Positions: the record at seq of millisecond ms (ledger.lua) is position
// ms*posSeqs + seq.
const posSeqs = 1_000_000

// Entries reads up to limit entries of sku after position after from its
// stream, the key stream: see [ledger.Reader]. The arguments are checked
// already. A stream entry of r records with id ms-seq (ledger.lua) holds
// positions ms*1,000,000 + seq-r+1 to ms*1,000,000 + seq, and an entry's
// Time is that millisecond (Redis's clock, or later when that clock went
// back: ids never do).
func Entries(ctx context.Context, c redis.UniversalClient, stream, sku string, after int64, limit int) ([]ledger.Entry, error) {
	start := "-" // the first stream entry that may hold a position past after
	if after > 0 {
		start = strconv.FormatInt(after/posSeqs, 10) + "-" + strconv.FormatInt(after%posSeqs, 10)
	}
	out := make([]ledger.Entry, 0, min(limit, 64))
	for {
		want := limit - len(out)
		msgs, err := c.XRangeN(ctx, stream, start, "+", int64(want)).Result()
		if err != nil {
			return nil, err
		}
		for _, msg := range msgs {
			if out, err = appendEntries(out, sku, msg, after, limit); err != nil {
				return nil, err
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
// the counters, then four lines a record, a run counted out into its
// records.
func records(v string) ([]ledger.Entry, error) {
	lines := strings.Split(v, "\n")
	if len(lines)%4 != 1 {
		return nil, fmt.Errorf("%d lines", len(lines))
	}
	es := make([]ledger.Entry, 0, len(lines)/4)
	for i := 1; i < len(lines); i += 4 {
		var err error
		if es, err = appendRecord(es, lines[i:i+4]); err != nil {
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

// appendRecord decodes the four lines of a record (ledger.lua), all but
// Held and Sold, and appends it to es: a run "KIND UNITS AVAILABLE N" as
// its N records.
func appendRecord(es []ledger.Entry, lines []string) ([]ledger.Entry, error) {
	var e ledger.Entry
	nums := strings.Fields(lines[0])
	if len(nums) != 3 && len(nums) != 4 {
		return es, fmt.Errorf("record %q", lines[0])
	}
	vals := [3]int64{1: 1} // units, available, run length
	for i := 1; i < len(nums); i++ {
		x, err := strconv.ParseInt(nums[i], 10, 64)
		if err != nil {
			return es, fmt.Errorf("record %q: %w", lines[0], err)
		}
		vals[i-1] = x
	}
	e.Kind, e.Units, e.After.Available = ledger.Kind(nums[0]), vals[0], vals[1]
	e.Key, e.Ref, e.Hold = lines[1], lines[2], lines[3]
	if len(nums) == 3 {
		return append(es, e), nil
	}
	// A run: its records' available step by the units, to the last one's.
	n := vals[2]
	step, ok := runStep(e, n)
	if !ok {
		return es, fmt.Errorf("run %q", lines[0])
	}
	last := e.After.Available
	for i := n - 1; i >= 0; i-- {
		e.After.Available = last + i*step
		es = append(es, e)
	}
	return es, nil
}

// runStep returns how Available steps from one record of a run of n
// records like e to the next (less the units for a reduce, plus them for
// a return); ok=false: ledger.lua writes no such run.
func runStep(e ledger.Entry, n int64) (step int64, ok bool) {
	if n < 2 || n > posSeqs || e.Key != "" || e.Ref != "" || e.Hold != "" || e.Units < 1 || e.Units > (1<<62)/n {
		return 0, false
	}
	switch e.Kind {
	case ledger.Reduce:
		return e.Units, true
	case ledger.Return:
		return -e.Units, true
	}
	return 0, false
}
