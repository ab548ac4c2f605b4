package rowlock_test

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/optiontest"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

// TestOptionsRule checks the options rule of the root package: a nil option
// is ignored, an out-of-range value or a schema name that is no identifier
// is ErrInvalidArgument from New, which does no I/O (the pool has no
// database behind it).
func TestOptionsRule(t *testing.T) {
	db := sqlx.NewDb(nil, "mysql")
	optiontest.Run(t, map[string]rowlock.Option{
		"refusals":     rowlock.WithRefusals(time.Second),
		"key TTL":      rowlock.WithKeyTTL(time.Second),
		"lock timeout": rowlock.WithLockTimeout(time.Second),
	}, map[string]rowlock.Option{
		"zero refusal TTL":      rowlock.WithRefusals(0),
		"refusal TTL over 10s":  rowlock.WithRefusals(11 * time.Second),
		"injected table":        rowlock.WithSchema(sqlstore.Schema{Table: "x; DROP TABLE y"}),
		"injected ledger":       rowlock.WithSchema(sqlstore.Schema{Ledger: `l" (x) --`}),
		"zero key TTL":          rowlock.WithKeyTTL(0),
		"negative key TTL":      rowlock.WithKeyTTL(-time.Second),
		"zero lock timeout":     rowlock.WithLockTimeout(0),
		"negative lock timeout": rowlock.WithLockTimeout(-time.Second),
	}, func(o rowlock.Option) (any, error) { return rowlock.New(db, o) })
	_, err := rowlock.New(nil)
	require.ErrorIs(t, err, inventory.ErrInvalidArgument, "nil db")
}
