// Package redlock_test holds the tests of redlock that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package redlock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redlock"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

var ctxFor = itest.CtxFor

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
