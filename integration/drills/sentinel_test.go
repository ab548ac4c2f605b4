//go:build drills

package drills

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/internal/faulttest"
)

// TestSentinel: one primary, two replicas, three sentinels; luascript,
// redislock over redisstore, tiered and segment's Redis Manager through
// go-redis's failover client,
// each without WithReplicas, with WithReplicas(1, ...) and with
// WithReplicas(2, ...) (every replica), through a SIGKILL of the primary
// (restarted as a replica once another took over, with its append-only
// file synced on every write) and a SENTINEL FAILOVER (a graceful switch:
// the old primary keeps its clients and its other replica until the
// sentinels have reconfigured them).
func TestSentinel(t *testing.T) {
	dep := faulttest.StartSentinel(t, 2, 3)
	for _, st := range []strategy{luaStrategy, redislockStrategy, tieredStrategy, segmentStrategy} {
		for _, replicas := range []int{0, 1, 2} {
			for _, ev := range []string{"SIGKILL primary", "SENTINEL FAILOVER"} {
				t.Run(fmt.Sprintf("%s/%s/%s", st.name, options(replicas), ev), func(t *testing.T) {
					client := redis.NewFailoverClient(&redis.FailoverOptions{
						MasterName: faulttest.SentinelMaster, SentinelAddrs: dep.SentinelAddrs(),
						PoolSize: 2 * workers, DialTimeout: 500 * time.Millisecond, ContextTimeoutEnabled: true})
					t.Cleanup(func() { client.Close() })
					d := drill{name: "Sentinel: " + ev, strategy: st.name, options: options(replicas), hot: "hot",
						m: st.make(t, client, prefix(), replicas), replicas: replicas > 0, settle: dep.Settled}
					switch ev {
					case "SIGKILL primary":
						// A supervisor restarts the killed node once a
						// replica took over, as a replica of it.
						d.strike = func(ctx context.Context) error {
							p, err := dep.Primary(ctx)
							if err != nil {
								return err
							}
							p.Kill()
							return faulttest.Eventually(ctx, func() error { return dep.Rejoin(ctx, p) })
						}
					default:
						var old *faulttest.Process
						d.strike = func(ctx context.Context) error {
							var err error
							if old, err = dep.Primary(ctx); err != nil {
								return err
							}
							if err := dep.Failover(ctx); err != nil {
								return err
							}
							return faulttest.Eventually(ctx, func() error {
								if p, err := dep.Primary(ctx); err != nil || p == old {
									return fmt.Errorf("not switched yet (%v)", err)
								}
								return nil
							})
						}
						d.settle = func(ctx context.Context) error {
							if old != nil {
								if err := dep.Rejoin(ctx, old); err != nil {
									return err
								}
								old = nil
							}
							return dep.Settled(ctx)
						}
					}
					runDrill(t, d)
				})
			}
		}
	}
}
