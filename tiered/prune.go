package tiered

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/jmoiron/sqlx"
)

// The ledger of synced entries (TABLEPREFIXsynced) would grow by a row per
// move for ever. Sync prunes it, per SKU, after each round that
// acknowledged entries: a ledger row is needed only while its entry may
// still be read from the journal, that is while the entry is in the stream
// (an entry leaves it, by XDEL in the MULTI that acknowledges it, only
// after the transaction that applied it committed). So Sync reads the
// oldest entry left in the stream (pending with any syncer or not yet
// read), takes the millisecond part of its id as the SKU's prune mark
// (TABLEPREFIXstock.pruned_ms, which only rises), and deletes the ledger
// rows below it. An entry below the mark that comes back (a Redis restored
// from an older AOF or RDB file holds entries the syncers applied and
// deleted since) is recognised by its id, skipped and acknowledged, never
// applied twice; Reconcile counts it as synced. The ledger then holds about
// one row per entry still in the journal: its lag, not its history.
//
// Stream ids are Redis's clock in milliseconds (made to rise within a
// stream). A Redis that lost its journal and restarts with its clock set
// back before the mark would write new entries below it, which the syncer
// would skip: those sales would be missing from SQL, and Reconcile would
// then report their units as lost (an undersell, never an oversell). Keep
// Redis's clock from stepping back (NTP slews it).

// ledgerState is the Manager's pruning state.
type ledgerState struct {
	off       bool         // tests: Sync does not prune
	belowMark atomic.Int64 // entries skipped because below the prune mark
	pruned    atomic.Int64 // ledger rows deleted
}

// entryMS returns the millisecond part of a stream entry id "ms-seq".
func entryMS(id string) (int64, error) {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return 0, fmt.Errorf("stream entry id %q", id)
	}
	return strconv.ParseInt(ms, 10, 64)
}

// prune raises sku's prune mark to the oldest entry left in its journal
// stream (or, when the stream is empty, to last, an entry just
// acknowledged) and deletes the ledger rows below it. It returns how many
// rows it deleted.
func (m *Manager) prune(ctx context.Context, sku, stream, last string) (int64, error) {
	oldest, err := m.rdb.XRangeN(ctx, stream, "-", "+", 1).Result()
	if err != nil {
		return 0, fmt.Errorf("tiered: prune ledger of %q: oldest journal entry: %w", sku, withCtx(ctx, err))
	}
	if len(oldest) > 0 {
		last = oldest[0].ID
	}
	mark, err := entryMS(last)
	if err != nil {
		return 0, fmt.Errorf("tiered: prune ledger of %q: %w", sku, err)
	}
	var n int64
	err = m.tx(ctx, func(tx *sqlx.Tx) error {
		n = 0
		var cur int64
		if err := tx.QueryRowxContext(ctx, m.q.mark, sku).Scan(&cur); err != nil {
			return err
		}
		if mark <= cur {
			return nil
		}
		if _, err := tx.ExecContext(ctx, m.q.setMark, mark, sku, mark); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, m.q.prune, sku, mark)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil // the SKU's row is gone
	}
	if err != nil {
		return 0, fmt.Errorf("tiered: prune ledger of %q: %w", sku, err)
	}
	m.ledger.pruned.Add(n)
	return n, nil
}
