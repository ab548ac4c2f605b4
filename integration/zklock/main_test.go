// Package zklock_test holds the tests of zklock that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package zklock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/sqlstore"
	"github.com/stockkit/inventory/zklock"
)

func TestMain(m *testing.M) { faulttest.VerifyTestMain(m) }

// quiet is a zk.Logger that drops everything.
type quiet struct{}

func (quiet) Printf(string, ...any) {}

func removeAll(conn *zk.Conn, p string) {
	children, _, _ := conn.Children(p)
	for _, c := range children {
		removeAll(conn, p+"/"+c)
	}
	_ = conn.Delete(p, -1)
}

// stores are the Stores the fault tests run on: Redis, and MariaDB.
var stores = []struct {
	name string
	open func(t *testing.T) zklock.Store
}{
	{"redis", func(t *testing.T) zklock.Store {
		c := testenv.Redis(t)
		s, err := redisstore.New(c, redisstore.WithPrefix(testenv.RedisPrefix(t, c)))
		require.NoError(t, err)
		return s
	}},
	{"mysql", func(t *testing.T) zklock.Store {
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

// root returns a lock root of its own for t, checked to be empty at the end.
func root(t *testing.T, conn *zk.Conn) string {
	r := "/inventory-test/" + testenv.Prefix()
	t.Cleanup(func() {
		children, _, err := conn.Children(r)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrConnectionClosed) {
			return
		}
		if assert.NoError(t, err) {
			assert.Empty(t, children, "lock directories left behind under %s", r)
		}
		_ = conn.Delete(r, -1)
	})
	return r
}
