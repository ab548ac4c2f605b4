// Package rowlock_test holds the tests of rowlock that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package rowlock_test

import (
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/sqlstore"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

func newManager(t testing.TB, db *sqlx.DB, schema sqlstore.Schema, opts ...rowlock.Option) *rowlock.Manager {
	t.Helper()
	m, err := rowlock.New(db, append([]rowlock.Option{rowlock.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	return m
}
