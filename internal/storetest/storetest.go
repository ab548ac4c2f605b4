// Package storetest makes the stores that the lock strategies' tests run
// their Managers over: a redisstore with keys of the test's own, or a
// sqlstore on tables of its own, each cleaned up when the test ends.
package storetest

import (
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
)

// Redis returns a redisstore on c under a key prefix unique to t, whose
// keys are deleted when t ends.
func Redis(t testing.TB, c redis.UniversalClient) *redisstore.Store {
	s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)))
	require.NoError(t, err)
	return s
}

// SQL returns a sqlstore over fresh tables in db, dropped when t ends.
func SQL(t testing.TB, db *sqlx.DB) *sqlstore.Store {
	s, err := sqlstore.New(db, sqlstore.WithSchema(sqltest.Schema(t, db)))
	require.NoError(t, err)
	return s
}

// Store is a named way to make a fresh Store for a test.
type Store struct {
	Name string
	Open func(t *testing.T) lockmgr.Store
}

// Stores are the stores redlock's and zklock's Managers run over: the
// standalone Redis and MariaDB.
var Stores = []Store{
	{"redis", func(t *testing.T) lockmgr.Store { return Redis(t, testenv.Redis(t)) }},
	{"mysql", func(t *testing.T) lockmgr.Store { return SQL(t, testenv.MySQL(t)) }},
}
