//go:build drills

package drills

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
)

// TestCluster: three masters with a replica each; luascript, redislock
// over redisstore and segment's Redis Manager through go-redis's Cluster
// client, with and without WithReplicas, through a SIGKILL of the master
// owning the hot SKU's slot (its replica is promoted; the killed node
// restarts and rejoins as a replica) and a live reshard of that slot to
// another master (CLUSTER SETSLOT MIGRATING/IMPORTING and MIGRATE, a batch
// of keys at a time).
// Every third buyer buys a cart of the hot SKU and one whose slot another
// master owns (the three strategies' Managers are all OrderManagers).
func TestCluster(t *testing.T) {
	dep := faulttest.StartCluster(t, 3, 1)
	const hot = "hot"
	slot := rediskeys.Slot(hot)
	for _, st := range []strategy{luaStrategy, redislockStrategy, segmentStrategy} {
		for _, replicas := range []int{0, 1} {
			for _, ev := range []string{"SIGKILL master", "reshard"} {
				t.Run(fmt.Sprintf("%s/%s/%s", st.name, options(replicas), ev), func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					owner, err := dep.Owner(ctx, slot)
					if err != nil {
						t.Fatal(err)
					}
					client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: dep.Addrs(),
						PoolSize: 2 * workers, DialTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
					t.Cleanup(func() { client.Close() })
					m := st.make(t, client, prefix(), replicas)
					other := "" // a cart's second SKU, for an OrderManager
					_, carts := m.(inventory.OrderManager)
					for i := 0; carts && other == ""; i++ {
						sku := "cart-" + strconv.Itoa(i)
						if o, err := dep.Owner(ctx, rediskeys.Slot(sku)); err == nil && o.ID != owner.ID {
							other = sku
						}
					}
					d := drill{name: "Cluster: " + ev, strategy: st.name, options: options(replicas), hot: hot, other: other,
						m: m, replicas: replicas > 0, settle: dep.Settled}
					switch ev {
					case "SIGKILL master":
						// A supervisor restarts the killed node once its
						// replica took over; it rejoins as a replica.
						d.strike = func(ctx context.Context) error {
							killed := dep.Process(owner.Addr)
							killed.Kill()
							err := faulttest.Eventually(ctx, func() error {
								o, err := dep.Owner(ctx, slot)
								if err == nil && o.ID == owner.ID {
									err = errors.New("replica not promoted yet")
								}
								return err
							})
							killed.Start()
							return err
						}
					default:
						d.strike = func(ctx context.Context) error { return reshard(ctx, t, dep, slot) }
					}
					runDrill(t, d)
				})
			}
		}
	}
}

// reshard moves slot from its master to the next master, its keys 100 at a
// time as redis-cli --cluster reshard does (one MIGRATE per batch), while
// the sale meets the slot half moved (ASK, and TRYAGAIN for scripts whose
// keys are split).
func reshard(ctx context.Context, t *testing.T, dep *faulttest.Cluster, slot int) error {
	nodes, err := dep.ClusterNodes(ctx)
	if err != nil {
		return err
	}
	src, err := dep.Owner(ctx, slot)
	if err != nil {
		return err
	}
	var masters []faulttest.ClusterNode
	var dst faulttest.ClusterNode
	for _, n := range nodes {
		if n.Master {
			masters = append(masters, n)
			if n.ID != src.ID && dst.ID == "" {
				dst = n
			}
		}
	}
	do := func(addr string, args ...any) *redis.Cmd {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
		defer c.Close()
		return c.Do(ctx, args...)
	}
	if err := do(dst.Addr, "cluster", "setslot", slot, "importing", src.ID).Err(); err != nil {
		return fmt.Errorf("importing: %w", err)
	}
	if err := do(src.Addr, "cluster", "setslot", slot, "migrating", dst.ID).Err(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	host, port, _ := net.SplitHostPort(dst.Addr)
	moved := 0
	for {
		keys, err := do(src.Addr, "cluster", "getkeysinslot", slot, 100).StringSlice()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := do(src.Addr, args...).Err(); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		moved += len(keys)
	}
	// The new owner first, then the old one, then the rest (as redis-cli does).
	for _, n := range append([]faulttest.ClusterNode{dst, src}, masters...) {
		if err := do(n.Addr, "cluster", "setslot", slot, "node", dst.ID).Err(); err != nil {
			return fmt.Errorf("setslot node on %s: %w", n.Addr, err)
		}
	}
	t.Logf("slot %d moved from %s to %s: %d keys", slot, src.Addr, dst.Addr, moved)
	return nil
}
