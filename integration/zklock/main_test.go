// Package zklock_test holds the tests of zklock that need the integration
// module's dependencies (toxiproxy, SQLite): network faults and stalls.
package zklock_test

import (
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory/integration/internal/itest"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
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

var ctxFor = itest.CtxFor

// root returns a lock root of its own for t, checked to be empty at the end.
var root = testenv.ZKRoot
