package tiered

import (
	"context"
	"fmt"

	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/ledger"
)

// The reading side of the movement ledger (ledger.go): the reader and
// the sync before an Init, which call the syncer (sync.go), which calls
// ledger.go.

var _ ledger.Reader = (*Manager)(nil)

// Entries implements [ledger.Reader]: a page of sku's records in SQL
// after position after. It first syncs sku's journal (unless the circuit
// to Redis is open), so that the page holds every move acknowledged before
// the call; a sync that fails fails the call.
func (m *Manager) Entries(ctx context.Context, sku string, after int64, limit int) ([]ledger.Entry, error) {
	if err := driver.ValidateSKU(sku); err != nil {
		return nil, fmt.Errorf("tiered: %w", err)
	}
	if err := ledger.CheckPage(after, limit); err != nil {
		return nil, err
	}
	if !m.cfg.ledgerOn {
		return nil, ledger.ErrNotKept
	}
	if !m.br.open() {
		if _, err := m.syncSKU(ctx, sku); err != nil {
			return nil, fmt.Errorf("tiered: ledger of %q: %w", sku, err)
		}
	}
	out, err := m.readPage(ctx, sku, after, limit)
	if err != nil {
		return nil, fmt.Errorf("tiered: ledger of %q: %w", sku, err)
	}
	return out, nil
}

// syncBeforeInit syncs sku's journal before an Init, so that the moves
// Redis made before it are recorded before its init row. It does nothing
// without a ledger or while the circuit is open; a sync that fails is
// left to the syncer (those moves are then recorded after the Init, and
// not at all if of the older generation; see syncedRows).
func (m *Manager) syncBeforeInit(ctx context.Context, sku string) {
	if !m.cfg.ledgerOn || m.br.open() {
		return
	}
	_, _ = m.syncSKU(ctx, sku)
}
