// Package optimistic_test holds the tests of optimistic that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package optimistic_test

import (
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/sqlstore"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

func newManager(t testing.TB, db *sqlx.DB, schema sqlstore.Schema, opts ...optimistic.Option) *optimistic.Manager {
	t.Helper()
	m, err := optimistic.New(db, append([]optimistic.Option{optimistic.WithSchema(schema)}, opts...)...)
	require.NoError(t, err)
	return m
}
