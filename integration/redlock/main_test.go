// Package redlock_test holds the tests of redlock that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/redlock"
	"github.com/stockkit/inventory/sqlstore"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

// stores are the Stores the fault tests run on: Redis, and MariaDB.
var stores = []struct {
	name string
	open func(t *testing.T) redlock.Store
}{
	{"redis", func(t *testing.T) redlock.Store {
		c := testenv.Redis(t)
		s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)))
		require.NoError(t, err)
		return s
	}},
	{"mysql", func(t *testing.T) redlock.Store {
		db := testenv.MySQL(t)
		s, err := sqlstore.New(db, sqlstore.WithSchema(sqltest.Schema(t, db)))
		require.NoError(t, err)
		return s
	}},
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func nodes(t testing.TB) []redis.UniversalClient {
	var cs []redis.UniversalClient
	for _, c := range testenv.RedlockClients(t) {
		cs = append(cs, c)
	}
	return cs
}

// lockPrefix returns a lock-key prefix unique to t, whose keys are deleted
// from every node of clients when t ends.
func lockPrefix(t testing.TB, clients []redis.UniversalClient) string {
	p := testenv.RedisPrefix(t, clients[0]) + ":"
	for _, c := range clients[1:] {
		t.Cleanup(func() { testenv.DeleteKeys(t, c, p+"*") })
	}
	return p
}

// prefix is the option of a lockPrefix.
func prefix(t testing.TB, clients []redis.UniversalClient) redlock.Option {
	return redlock.WithPrefix(lockPrefix(t, clients))
}
