package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/driver"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/baseline"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/ledger"
	"github.com/stockkit/inventory/luascript"
)

// keyedLua is the cheapest keyed script: baseline.RedisLua plus the record of the
// call's key, written as luascript writes it (SET NX GET PX, the same key
// layout and TTL), and no more: no hold marker, no errors told apart. It is
// the floor of a call that records its key, the baseline that shows what
// luascript's keyed call costs beyond its record (issue 13.1).
const keyedLua = `local v = tonumber(redis.call('GET', KEYS[1]))
if v and v >= tonumber(ARGV[1]) then
  if redis.call('SET', KEYS[2], string.format('%d', v - ARGV[1]), 'NX', 'GET', 'PX', ARGV[2]) then return -2 end
  return redis.call('DECRBY', KEYS[1], ARGV[1])
end
return -1`

// BenchmarkLuascript compares luascript's Reduce with the bare
// check-and-DECRBY EVALSHA loop on the same Redis (issue 13.1, 13.2):
// calls one at a time (WithMaxBatch(1)), unkeyed and keyed, on one hot SKU
// and 64 spread SKUs at 16, 64 and 256 goroutines; and the default Manager,
// which merges the concurrent calls of one SKU, on the hot SKU. Keyed calls
// have a fresh key each. At 64 goroutines the keyed calls are also
// compared with keyedLua, the cheapest script that records its key: what
// luascript's keyed call costs beyond the record itself. The stock never
// runs out. On the hot SKU the merged calls with a movement ledger
// (WithLedger(0): every entry kept) are compared with the same calls
// without one, unkeyed and keyed, alternating. On the hot SKU the merged
// calls are also compared with
// redis-benchmark's unpipelined EVALSHA of the bare script at as many
// connections (the ceiling of one script call per round trip, issue 13.2).
// (luascript's own bench_test.go has the Redis CPU per call.) Both sides
// run on a private redis-server (see privateRedis).
func BenchmarkLuascript(b *testing.B) {
	ctx := context.Background()
	const prefix = "bench"
	client := privateRedis(b, 256)
	newManager := func(opts ...luascript.Option) *luascript.Manager {
		m, err := luascript.New(client, append([]luascript.Option{luascript.WithPrefix(prefix), luascript.WithKeyTTL(time.Minute)}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	perCall, merged := newManager(luascript.WithMaxBatch(1)), newManager()
	ledgered := newManager(luascript.WithLedger(0))
	bare, keyedFloor := baseline.RedisScript, redis.NewScript(keyedLua)
	for _, s := range []*redis.Script{bare, keyedFloor} {
		if err := s.Load(ctx, client).Err(); err != nil {
			b.Fatal(err)
		}
	}
	var keys atomic.Int64
	for _, l := range []layout{hot, spread} {
		skus := l.names("lua")
		stock := make(map[string][]string, len(skus))
		for _, s := range skus {
			stock[s] = []string{rediskeys.Stock(prefix, s)}
		}
		reset := func(ctx context.Context) error {
			for _, s := range skus {
				if err := perCall.Init(ctx, s, inventory.MaxStock); err != nil {
					return err
				}
			}
			return nil
		}
		baseline := benchcmp.Side{Name: "bare check-and-DECRBY EVALSHA", Reset: reset,
			Op: func(ctx context.Context, _ int, rng *rand.Rand) error {
				return bare.EvalSha(ctx, client, stock[pick(rng, skus)], 1).Err()
			}}
		floor := benchcmp.Side{Name: "bare check, SET NX GET PX of the key's record and DECRBY EVALSHA", Reset: reset,
			Op: func(ctx context.Context, _ int, rng *rand.Rand) error {
				sku := pick(rng, skus)
				rec := rediskeys.Key(prefix, sku, driver.DirReduce, "k"+strconv.FormatInt(keys.Add(1), 10))
				return keyedFloor.EvalSha(ctx, client, []string{stock[sku][0], rec}, 1, time.Minute.Milliseconds()).Err()
			}}
		reduce := func(m *luascript.Manager, keyed bool) benchcmp.Op {
			return func(ctx context.Context, _ int, rng *rand.Rand) error {
				sku := pick(rng, skus)
				var err error
				if keyed { // as a caller writes it: no slice of options built
					_, err = m.Reduce(ctx, sku, 1, inventory.WithKey("k"+strconv.FormatInt(keys.Add(1), 10)))
				} else {
					_, err = m.Reduce(ctx, sku, 1)
				}
				return err
			}
		}
		type row struct {
			name, side string
			m          *luascript.Manager
			keyed      bool
			gs         []int
			base       benchcmp.Side
		}
		rows := []row{
			{l.name + ", unkeyed", "luascript, unkeyed, one call per script", perCall, false, goroutines, baseline},
			{l.name + ", keyed", "luascript, keyed, one call per script", perCall, true, goroutines, baseline},
			{l.name + ", keyed, vs keyed floor", "luascript, keyed, one call per script", perCall, true, []int{64}, floor},
		}
		if l == hot {
			// The movement ledger's price: the same merged calls with and without it.
			noLedger := func(keyed bool, name string) benchcmp.Side {
				return benchcmp.Side{Name: name, Reset: reset, Op: reduce(merged, keyed)}
			}
			rows = append(rows,
				row{l.name + ", merged, unkeyed", "luascript, unkeyed, merged (default)", merged, false, []int{64, 256}, baseline},
				row{l.name + ", merged, keyed", "luascript, keyed, merged (default)", merged, true, []int{64}, baseline},
				row{l.name + ", merged, unkeyed, ledger", "luascript, unkeyed, merged, WithLedger", ledgered, false, []int{64},
					noLedger(false, "luascript, unkeyed, merged, no ledger")},
				row{l.name + ", merged, keyed, ledger", "luascript, keyed, merged, WithLedger", ledgered, true, []int{64},
					noLedger(true, "luascript, keyed, merged, no ledger")})
		}
		ceiling := redisBenchmark(b, client, bare, stock[skus[0]][0])
		for _, r := range rows {
			for _, g := range r.gs {
				benchcmp.Run(b, benchcmp.Case{
					Group: "luascript", Name: r.name, Layout: l.String(), Goroutines: g,
					Strategy: benchcmp.Side{Name: r.side, Reset: reset, Op: reduce(r.m, r.keyed)},
					Baseline: r.base,
				})
			}
		}
		if l != hot {
			continue
		}
		for _, keyed := range []bool{false, true} {
			for _, g := range []int{64, 256} {
				name, side := "hot, merged, unkeyed, vs redis-benchmark", "luascript, unkeyed, merged (default)"
				if keyed {
					name, side = "hot, merged, keyed, vs redis-benchmark", "luascript, keyed, merged (default)"
				}
				benchcmp.Run(b, benchcmp.Case{
					Group: "luascript", Name: name, Layout: l.String(), Goroutines: g,
					Strategy: benchcmp.Side{Name: side, Reset: reset, Op: reduce(merged, keyed)},
					Baseline: ceiling,
				})
			}
		}
	}
}

// privateRedis starts a redis-server of the benchmark's own, configured as
// the shared one (no persistence) but with no replica and no other client:
// on a 2-core machine a replica of the shared Redis takes CPU from both
// sides of a comparison (more from keyed calls, whose records it copies),
// which a production replica on its own host does not. It returns a client
// with a pool of pool connections; the server is killed when b ends.
func privateRedis(b *testing.B, pool int) *redis.Client {
	srv := faulttest.StartRedis(b, "--appendonly", "no")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), PoolSize: pool, ContextTimeoutEnabled: true})
	b.Cleanup(func() { c.Close() })
	return c
}

// redisBenchmark is the ceiling of one script call per round trip:
// redis-benchmark (redis-tools) sending EVALSHA of script on key, 1, from
// as many connections as the strategy has goroutines, unpipelined, for
// about a turn's length (its request count is the turn's length times its
// last rate). Its rate is what it reports.
func redisBenchmark(b *testing.B, c *redis.Client, script *redis.Script, key string) benchcmp.Side {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		testenv.Missing(b, "redis-benchmark (apt-get install redis-tools)", err)
	}
	host, port, err := net.SplitHostPort(c.Options().Addr)
	if err != nil {
		b.Fatal(err)
	}
	var last float64 // the last rate, for the next request count
	turn := func(ctx context.Context, g int, d time.Duration, ops int) (float64, error) {
		n := ops
		if n == 0 {
			n = max(int(last*d.Seconds()), 20*g)
		}
		out, err := exec.CommandContext(ctx, bin, "-h", host, "-p", port, "-c", strconv.Itoa(g), "-n", strconv.Itoa(n),
			"--csv", "evalsha", script.Hash(), "1", key, "1").Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			return 0, fmt.Errorf("redis-benchmark: %w (output %q)", err, out)
		}
		rows, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
		if err != nil || len(rows) < 2 || len(rows[1]) < 2 {
			return 0, fmt.Errorf("redis-benchmark output %q: %v", out, err)
		}
		if last, err = strconv.ParseFloat(rows[1][1], 64); err != nil || last <= 0 {
			return 0, fmt.Errorf("redis-benchmark output %q: rate %v", out, err)
		}
		return last, nil
	}
	return benchcmp.Side{Name: "redis-benchmark, unpipelined EVALSHA of the bare script", Turn: turn}
}

// BenchmarkLuascriptLedgerBytes measures the Redis memory of luascript's
// movement ledger per entry: on a private redis-server, it writes
// ledgerRows keyed Reduces with a reference (a 24-byte SKU, a 20-byte key,
// a 16-byte reference, as BenchmarkLedgerRowBytes) through
// WithLedger(0), from 16 goroutines (so merged), then reports MEMORY USAGE
// of the SKU's stream (SAMPLES 0: every node counted) over the entries
// its history reads back, and how many entries a stream entry holds (one
// stream entry per merged batch); the same for unkeyed calls with no
// reference. Run it with -benchtime 1x.
func BenchmarkLuascriptLedgerBytes(b *testing.B) {
	ctx := context.Background()
	client := privateRedis(b, 32)
	m, err := luascript.New(client, luascript.WithPrefix("bench"), luascript.WithLedger(0))
	if err != nil {
		b.Fatal(err)
	}
	for _, keyed := range []bool{true, false} {
		sku := fmt.Sprintf("ledger-bytes-%011d", 0) // 24 bytes
		name := "keyed, with a reference"
		if !keyed {
			sku, name = fmt.Sprintf("ledger-bytes-%011d", 1), "unkeyed, no reference"
		}
		b.Run(name, func(b *testing.B) {
			if err := m.Init(ctx, sku, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			if err := writeLedger(ctx, m, sku, keyed); err != nil {
				b.Fatal(err)
			}
			n := 0
			for _, err := range ledger.History(ctx, m, sku, 0) {
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
			if n != ledgerRows {
				b.Fatalf("the ledger of %s holds %d entries, want %d", sku, n, ledgerRows)
			}
			stream := strings.Replace(rediskeys.Stock("bench", sku), "}:s:", "}:l:", 1)
			size, err := client.MemoryUsage(ctx, stream, 0).Result()
			if err != nil {
				b.Fatal(err)
			}
			xlen, err := client.XLen(ctx, stream).Result()
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(size)/float64(n), "bytes/entry")
			b.ReportMetric(float64(n)/float64(xlen), "entries/stream-entry")
			b.ReportMetric(0, "ns/op")
		})
	}
}
