//go:build drills

package drills

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	_ "github.com/stockkit/inventory/integration/sqlite" // registers "sqlite" for tiered's SQL side
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redisstore"
	"github.com/stockkit/inventory/segment"
	"github.com/stockkit/inventory/tiered"
)

// replicaTimeout is WithReplicas's timeout in every drill.
const replicaTimeout = 500 * time.Millisecond

// strategy makes a Manager over a drill's Redis client, with
// WithReplicas(replicas, replicaTimeout) unless replicas is 0, under a key
// prefix of its own.
type strategy struct {
	name string
	make func(t *testing.T, c redis.UniversalClient, prefix string, replicas int) inventory.StockManager
}

var prefixes atomic.Int64

func prefix() string { return fmt.Sprintf("drill%d", prefixes.Add(1)) }

func options(replicas int) string {
	if replicas > 0 {
		return fmt.Sprintf("WithReplicas(%d, %v)", replicas, replicaTimeout)
	}
	return "-"
}

var (
	luaStrategy = strategy{"luascript", func(t *testing.T, c redis.UniversalClient, p string, replicas int) inventory.StockManager {
		opts := []luascript.Option{luascript.WithPrefix(p)}
		if replicas > 0 {
			opts = append(opts, luascript.WithReplicas(replicas, replicaTimeout))
		}
		m, err := luascript.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}}
	redislockStrategy = strategy{"redislock+redisstore", func(t *testing.T, c redis.UniversalClient, p string, replicas int) inventory.StockManager {
		opts := []redisstore.Option{redisstore.WithPrefix(p)}
		if replicas > 0 {
			opts = append(opts, redisstore.WithReplicas(replicas, replicaTimeout))
		}
		s, err := redisstore.New(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		m, err := redislock.New(c, s, redislock.WithPrefix(p))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}}
	// segment's Redis Manager: 8 segments spread over the slots (on the
	// Cluster, over the three masters), so that a failover strikes some
	// of a SKU's segments and not others, mid-borrow as well.
	// (A StockManager only: its Cluster drills have no carts.)
	segmentStrategy = strategy{"segment (Redis, 8 segments)", func(t *testing.T, c redis.UniversalClient, p string, replicas int) inventory.StockManager {
		opts := []segment.Option{segment.WithPrefix(p)}
		if replicas > 0 {
			opts = append(opts, segment.WithReplicas(replicas, replicaTimeout))
		}
		m, err := segment.NewRedis(c, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}}
	// tiered is kept thin (its public constructor, tables, syncer): its
	// SQL side is a private SQLite file.
	tieredStrategy = strategy{"tiered (Redis side; SQLite)", func(t *testing.T, c redis.UniversalClient, p string, replicas int) inventory.StockManager {
		opts := []tiered.Option{tiered.WithPrefix(p)}
		if replicas > 0 {
			opts = append(opts, tiered.WithReplicas(replicas, replicaTimeout))
		}
		m, err := tiered.New(c, testenv.SQLite(t), opts...)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		t.Cleanup(func() {
			cancel()
			<-done
			m.Close()
		})
		if err := eventually(ctx, m.CreateTables); err != nil {
			t.Fatal(err)
		}
		go func() {
			defer close(done)
			_ = m.Run(ctx)
		}()
		return m
	}}
)
