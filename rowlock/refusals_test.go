package rowlock_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/refusals/refusalstest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/rowlock"
)

// TestRefusals checks WithRefusals on every engine (refusalstest.Run):
// stale refusals for at most the TTL, a Manager's own Return and Init end
// them, keyed calls always reach the database, and nothing is sold that
// the database did not sell.
func TestRefusals(t *testing.T) {
	sqltest.Run(t, func(t *testing.T, db *sqlx.DB) {
		schema := sqltest.Schema(t, db)
		const ttl = 300 * time.Millisecond
		refusalstest.Run(t, newManager(t, db, schema, rowlock.WithRefusals(ttl)), newManager(t, db, schema), testenv.Prefix(), ttl)
	})
}
