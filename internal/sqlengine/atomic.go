package sqlengine

import (
	"context"

	"github.com/jmoiron/sqlx"
)

// Atomic runs fn in one transaction: a savepoint of caller's when caller
// is not nil, else a transaction of its own (see [Tables.Tx]).
func (t *Tables) Atomic(ctx context.Context, caller *sqlx.Tx, op string, fn func(tx *sqlx.Tx) error) error {
	if caller == nil {
		return t.Tx(ctx, fn)
	}
	return t.savepoint(ctx, caller, op, fn)
}

// savepoint runs fn inside the caller's transaction tx, between SAVEPOINT
// and RELEASE; when fn fails it rolls back to the savepoint, so that a call
// that returns an error leaves the caller's transaction as it found it.
func (t *Tables) savepoint(ctx context.Context, tx *sqlx.Tx, op string, fn func(tx *sqlx.Tx) error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT inventory_call"); err != nil {
		return t.Err(ctx, op+": savepoint", err)
	}
	if err := fn(tx); err != nil {
		// After a deadlock MySQL has rolled the whole transaction back and
		// the savepoint is gone; the error says to retry the transaction.
		_, _ = tx.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT inventory_call")
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE SAVEPOINT inventory_call"); err != nil {
		return t.Err(ctx, op+": release savepoint", err)
	}
	return nil
}
