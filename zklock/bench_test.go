package zklock_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/lockbench"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/zklock"
)

// zkLock is the baseline lock: go-zookeeper's own zk.Lock, one per call,
// under a directory per SKU that is never cleaned up.
type zkLock struct {
	conn *zk.Conn
	root string
}

func (l *zkLock) lock(sku string) (unlock func(), err error) {
	lk := zk.NewLock(l.conn, l.root+"/"+hex.EncodeToString([]byte(sku)), zk.WorldACL(zk.PermAll))
	if err := lk.Lock(); err != nil {
		return nil, err
	}
	return func() { _ = lk.Unlock() }, nil
}

// BenchmarkReduce measures protected decrements per second: one hot SKU or
// 256 spread SKUs, on 1, 16 and 64 goroutines sharing one Manager, or
// (hot-procs) each with its own Manager as separate processes would, all on
// one ZooKeeper session. Beside it, in the same run, the baseline:
// go-zookeeper's zk.Lock, read, write, zk.Unlock on the same data. Metrics:
// ops/s, ratio (library/baseline ops/s) and lock-wait p50/p99 of both.
func BenchmarkReduce(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) lockbench.Backend
	}{
		{"redis", func(b *testing.B) lockbench.Backend { return lockbench.Redis(b, testenv.Redis(b)) }},
		{"mariadb", func(b *testing.B) lockbench.Backend { return lockbench.SQL(b, sqltest.Engines[0].Open(b)) }},
	}
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			ctx := context.Background()
			bs := st.open(b)
			skus := make([]string, 256)
			for i := range skus {
				skus[i] = "sku-" + strconv.Itoa(i)
				if err := bs.Store.Init(ctx, skus[i], inventory.MaxStock/2); err != nil {
					b.Fatal(err)
				}
			}
			for _, mode := range []string{"hot", "spread", "hot-procs"} {
				for _, g := range []int{1, 16, 64} {
					b.Run(fmt.Sprintf("%s/g=%d", mode, g), func(b *testing.B) {
						pick := func(*mrand.Rand) string { return skus[0] }
						if mode == "spread" {
							pick = func(r *mrand.Rand) string { return skus[r.IntN(len(skus))] }
						}
						benchReduce(b, bs, g, mode == "hot-procs", pick)
					})
				}
			}
		})
	}
}

func benchReduce(b *testing.B, bs lockbench.Backend, g int, procs bool, pick func(*mrand.Rand) string) {
	ctx := context.Background()
	conn := testenv.ZooKeeper(b)
	root := "/inventory-bench/" + testenv.Prefix()
	b.Cleanup(func() { removeAll(conn, "/inventory-bench") })
	var lw lockbench.Waits
	managers := make([]*lockmgr.Manager, 1)
	if procs {
		managers = make([]*lockmgr.Manager, g)
	}
	for i := range managers {
		l, err := zklock.NewLocker(conn, zklock.WithRoot(root+"/lib"))
		if err != nil {
			b.Fatal(err)
		}
		if managers[i], err = lockmgr.NewManager(lockbench.TimedLocker{Locker: l, W: &lw}, bs.Store); err != nil {
			b.Fatal(err)
		}
	}
	var m atomic.Int64
	libOp := func(rng *mrand.Rand) error {
		_, err := managers[m.Add(1)%int64(len(managers))].Reduce(ctx, pick(rng), 1)
		return err
	}
	var bw lockbench.Waits
	zl := &zkLock{conn: conn, root: root + "/base"}
	baseOp := func(rng *mrand.Rand) error {
		sku := pick(rng)
		start := time.Now()
		unlock, err := zl.lock(sku)
		if err != nil {
			return err
		}
		bw.Add(time.Since(start))
		defer unlock()
		n, err := bs.Read(ctx, sku)
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("baseline ran out of stock")
		}
		return bs.Write(ctx, sku, n-1)
	}

	lockbench.Compare(b, g, libOp, baseOp, &lw, &bw, func() {})
}

// removeAll deletes p and everything under it, best effort.
func removeAll(conn *zk.Conn, p string) {
	children, _, _ := conn.Children(p)
	for _, c := range children {
		removeAll(conn, p+"/"+c)
	}
	_ = conn.Delete(p, -1)
}
