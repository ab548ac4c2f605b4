package zklock_test

import (
	"context"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/inventorytest"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/zklock"
)

// FuzzManager compares zklock over redisstore, call by call, with the
// reference, under a fresh key prefix and lock root; both are deleted at
// the end.
func FuzzManager(f *testing.F) {
	c := testenv.Redis(f)
	conn := testenv.ZooKeeper(f)
	pfx := testenv.Prefix()
	f.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, pfx+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		removeAll(conn, "/inventory-test/"+pfx)
	})
	s, err := redisstore.New(c, redisstore.WithPrefix(pfx))
	if err != nil {
		f.Fatal(err)
	}
	m, err := zklock.New(conn, s, zklock.WithRoot("/inventory-test/"+pfx))
	if err != nil {
		f.Fatal(err)
	}
	inventorytest.Fuzz(f, m)
}

// removeAll deletes p and everything under it, best effort.
func removeAll(conn *zk.Conn, p string) {
	children, _, _ := conn.Children(p)
	for _, c := range children {
		removeAll(conn, p+"/"+c)
	}
	_ = conn.Delete(p, -1)
}
