package tiered

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
)

// The fence's targets of issue 29 (item 2) beside TestRestoredMidSale:
// each on private servers the test starts and kills, with a syncer that
// lags seconds (fenceSync), selling one unit a call. A sale is over when a
// call is refused for want of stock with the circuit closed; then SQL,
// drained, says how many units were sold and recorded lost, and
//
//	acknowledged - forgotten + lost == initial
//
// where forgotten counts the acknowledged moves Redis no longer has: the
// oversell is forgotten - lost when positive, the undersell lost -
// forgotten.

// fenceSync is the sync interval of these tests: the journal reaches SQL
// seconds after the moves, as in issue 29's attack (3 s there), here
// after the fault on a loaded machine too.
const fenceSync = 10 * time.Second

// The chunk and low-water mark of these tests.
const fenceChunk, fenceLowWater = 50, 10

// fenceDropBound bounds what a fence drops of one SKU sold by one
// sequential buyer: the allotment (below the low-water mark plus a chunk)
// and a grant SQL made that Redis had not applied (a background refill
// beside the grant of a Reduce that found the allotment short).
const fenceDropBound = fenceLowWater + 2*fenceChunk

// fenceOpts are the options of every Manager of these tests.
func fenceOpts(extra ...Option) []Option {
	return append([]Option{WithChunk(fenceChunk), WithLowWater(fenceLowWater), WithBreaker(3, 100*time.Millisecond),
		WithSyncInterval(fenceSync)}, extra...)
}

// seller sells through a Manager, one unit a call, and counts what was
// acknowledged.
type seller struct {
	m      *Manager
	acked  atomic.Int64
	failed atomic.Int64
}

// sell makes up to n acknowledged Reduces of one unit of sku (all it can
// when n < 0), retrying the calls that fail, and pausing pause between
// calls, until the stock runs out (a refusal with the circuit closed) or
// stop is closed. It reports whether the stock ran out.
func (s *seller) sell(ctx context.Context, t *testing.T, sku string, n int, pause time.Duration, stop <-chan struct{}) bool {
	for n != 0 {
		select {
		case <-stop:
			return false
		case <-ctx.Done():
			t.Errorf("selling %s: %v", sku, ctx.Err())
			return false
		default:
		}
		_, err := s.m.Reduce(ctx, sku, 1)
		switch {
		case err == nil:
			s.acked.Add(1)
			n--
			time.Sleep(pause)
		case errors.Is(err, inventory.ErrInsufficientStock):
			if !s.m.br.open() {
				return true
			}
			time.Sleep(20 * time.Millisecond) // the recovery re-warms Redis
		default:
			if s.failed.Add(1) >= 1000 {
				t.Errorf("calls keep failing: %v", err)
				return false
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return false
}

// syncing runs m's syncer until t ends.
func syncing(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = m.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// fenceResult is what a sale of these tests came to, for one SKU.
type fenceResult struct {
	acked, over, under int64
	// forgotten counts the acknowledged moves SQL, drained, does not have:
	// those Redis forgot.
	forgotten int64
	// lost is the units SQL recorded lost, reported is those the
	// recoveries reported (Drift.Lost).
	lost, reported int64
	restarted      bool // a recovery saw Redis restart
}

// fenceFigures drains m, logs the figures of a sale of sku and checks
// what holds after any fault: SQL has every unit sold, lost or left, the
// SKU sold out, and the recoveries reported every unit recorded lost.
func fenceFigures(ctx context.Context, t *testing.T, m *Manager, what, sku string, initial, acked, failed int64) fenceResult {
	t.Helper()
	require.NoError(t, m.Drain(ctx))
	s := m.totals(ctx, t, sku)
	recs, recFailed, _ := m.Recoveries()
	r := fenceResult{acked: acked, over: max(acked-initial, 0), under: max(initial-acked, 0), lost: s.lost,
		forgotten: acked - (s.sold - s.returned + s.direct)}
	for _, rec := range recs {
		r.restarted = r.restarted || rec.Restarted
		for _, d := range rec.Drifts {
			if d.SKU == sku {
				r.reported += d.Lost
			}
		}
	}
	load, _ := os.ReadFile("/proc/loadavg")
	t.Logf("FIGURES %s: initial %d, acknowledged %d, oversold %d, undersold %d; forgotten by Redis %d; SQL: sold %d, fallback %d, lost %d (recoveries reported %d); calls failed %d; recoveries %d (failed %d, restart seen %v); load %s",
		what, initial, acked, r.over, r.under, r.forgotten, s.sold, s.direct, s.lost, r.reported, failed, len(recs), recFailed, r.restarted,
		strings.TrimSpace(string(load)))
	checkDrained(t, s, initial)
	assert.Zero(t, s.pool+s.allot, "sold out: %+v", s)
	assert.Equal(t, s.lost, r.reported, "the recoveries reported every unit recorded lost")
	return r
}

// onFenceModes runs f as two subtests, "fenced" (the default) and
// "trusted" (WithTrustRestarts), with the options of each (fenceOpts and
// extra).
func onFenceModes(t *testing.T, f func(t *testing.T, name string, trust bool, opts []Option), extra ...Option) {
	for _, trust := range []bool{false, true} {
		name, opts := "fenced", fenceOpts(extra...)
		if trust {
			name, opts = "trusted", append(opts, WithTrustRestarts())
		}
		t.Run(name, func(t *testing.T) { f(t, name, trust, opts) })
	}
}

// The SKU and stock of a sale of one SKU.
const fenceSKU, fenceInitial = "a", 300

// startSale inits fenceSKU and sells 120 units of it, and returns the
// seller.
func startSale(ctx context.Context, t *testing.T, m *Manager) *seller {
	require.NoError(t, m.Init(ctx, fenceSKU, fenceInitial))
	s := &seller{m: m}
	s.sell(ctx, t, fenceSKU, 120, 0, nil)
	return s
}

// endKept sells fenceSKU out after a fault that lost no acknowledged move
// (what says which) and checks the outcome: 0 oversold, SQL has every
// acknowledged move, and at most as many more as calls failed (a call cut
// by the fault may have taken effect); trusted, nothing lost (undersold
// only the failed calls that took effect);
// fenced, the restart seen and the undersell the allotment the fence
// dropped, at most fenceDropBound.
func endKept(ctx context.Context, t *testing.T, m *Manager, s *seller, what string, trust bool) {
	t.Helper()
	require.True(t, s.sell(ctx, t, fenceSKU, -1, 0, nil), "sold out")
	r := fenceFigures(ctx, t, m, what, fenceSKU, fenceInitial, s.acked.Load(), s.failed.Load())
	assert.Zero(t, r.over, "oversold")
	assert.LessOrEqual(t, r.forgotten, int64(0), "Redis forgot acknowledged moves")
	assert.GreaterOrEqual(t, r.forgotten, -s.failed.Load(), "SQL has more moves than the calls that failed could make")
	if trust {
		assert.Zero(t, r.lost, "a trusted restart that forgot nothing loses nothing")
		assert.Equal(t, -r.forgotten, r.under, "undersold only the calls that failed and took effect")
		return
	}
	assert.True(t, r.restarted, "the watch saw the restart")
	assert.Equal(t, r.lost, r.under, "the undersell is the allotment the fence dropped")
	assert.LessOrEqual(t, r.under, int64(fenceDropBound), "at most the allotment and a grant in flight")
}

// TestFenceCompleteAOF SIGKILLs a private Redis with appendfsync always
// mid-sale and restarts it from its own, complete, append-only file: it
// forgot nothing. Fenced (the default), the recovery still drops Redis's
// state and records its allotment as lost: 0 oversold, an undersell of at
// most the allotment and a grant in flight; trusting restarts, 0
// oversold and 0 lost.
func TestFenceCompleteAOF(t *testing.T) {
	onFenceModes(t, func(t *testing.T, name string, trust bool, opts []Option) {
		srv, m := privateManager(t, testenv.MySQL(t), opts...)
		syncing(t, m)
		ctx := ctxT(t, 40*time.Second)
		s := startSale(ctx, t, m)
		srv.Kill()
		srv.Start()
		endKept(ctx, t, m, s, "complete AOF, "+name, trust)
	})
}

// TestFencePromotedReplica runs tiered with WithReplicas(1, ...) on a
// private primary and its replica, SIGKILLs the primary mid-sale, promotes
// the replica (REPLICAOF NO ONE), points the client's dialer at it and
// makes the old primary its replica. The replica had every acknowledged
// move: 0 oversold, fenced or not; fenced, the recovery drops the promoted
// Redis's state (another server: a new run_id at the client's address)
// and records its allotment lost.
func TestFencePromotedReplica(t *testing.T) {
	onFenceModes(t, func(t *testing.T, name string, trust bool, opts []Option) {
		primary := faulttest.StartRedis(t)
		replica := faulttest.StartReplica(t, primary)
		var target atomic.Value
		target.Store(primary.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: "tiered-primary:6379", DialTimeout: 200 * time.Millisecond, MaxRetries: -1,
			Dialer: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, target.Load().(string))
			}})
		t.Cleanup(func() { rdb.Close() })
		m := newEnv(t, rdb, testenv.MySQL(t)).manager(t, opts...)
		syncing(t, m)
		ctx := ctxT(t, 40*time.Second)
		s := startSale(ctx, t, m)

		primary.Kill()
		promote := redis.NewClient(&redis.Options{Addr: replica.Addr()})
		t.Cleanup(func() { promote.Close() })
		require.NoError(t, promote.ReplicaOf(ctx, "NO", "ONE").Err())
		target.Store(replica.Addr())
		primary.Start() // its own AOF, then a replica of the promoted one
		old := redis.NewClient(&redis.Options{Addr: primary.Addr()})
		t.Cleanup(func() { old.Close() })
		host, port, _ := net.SplitHostPort(replica.Addr())
		require.NoError(t, old.ReplicaOf(ctx, host, port).Err())
		endKept(ctx, t, m, s, "promoted replica, WithReplicas(1), "+name, trust)
	}, WithReplicas(1, 2*time.Second))
}

// fenceChildEnv carries the spec of TestFenceTwoProcesses's child process.
const fenceChildEnv = "TIERED_FENCE_CHILD"

// childSpec is what the child process sells, and where.
type childSpec struct {
	Addr, Prefix, Tables string
	SKUs                 []string
}

// TestFenceTwoProcesses sells two SKUs from two processes over one private
// Redis: this test and a child process (the test binary run again), whose
// acknowledged sales it counts through a pipe. It copies Redis's
// append-only file mid-sale, lets both sell on, SIGKILLs the child and
// Redis together, and restarts Redis from the copy. The survivor's restart
// watch fences the restored Redis before its first call, and its recovery
// records what Redis held as lost: the moves both processes made after the
// copy are forgotten, and not sold again. Target of issue 29: oversold at
// most the killed process's unsynced moves, and reported; measured: 0.
func TestFenceTwoProcesses(t *testing.T) {
	if spec := os.Getenv(fenceChildEnv); spec != "" {
		fenceChild(t, spec)
		return
	}
	srv, m := privateManager(t, testenv.MySQL(t), fenceOpts()...)
	syncing(t, m)
	ctx := ctxT(t, 50*time.Second)
	skus := []string{"a", "b"}
	const initial = 300
	for _, sku := range skus {
		require.NoError(t, m.Init(ctx, sku, initial))
	}
	child, childAcked, childDone := startChild(t, childSpec{Addr: srv.Addr(), Prefix: m.cfg.prefix, Tables: m.cfg.tablePrefix, SKUs: skus})

	// This process sells too, a unit of each SKU in turn, until told.
	sellers := map[string]*seller{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, sku := range skus {
		s := &seller{m: m}
		sellers[sku] = s
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.sell(ctx, t, sku, -1, 2*time.Millisecond, stop)
		}()
	}
	childTotal := func() int64 { return childAcked[0].Load() + childAcked[1].Load() }
	waitFor := func(n int64) {
		require.NoError(t, faulttest.Eventually(ctx, func() error {
			if childTotal() < n {
				return errors.New("the child sells slowly")
			}
			return nil
		}), "the child sold %d", childTotal())
	}
	waitFor(50)
	parentAcked := func() int64 { return sellers["a"].acked.Load() + sellers["b"].acked.Load() }
	atCopy := childTotal() + parentAcked() // the copy has these, and maybe more
	older := filepath.Join(t.TempDir(), "older")
	copyDir(t, srv.DataDir(), older) // while Redis serves: an older state
	waitFor(childTotal() + 60)

	// SIGKILL both, restore Redis from the copy, restart it.
	killed := time.Now()
	require.NoError(t, syscall.Kill(child.Process.Pid, syscall.SIGKILL))
	srv.Kill()
	parentAtKill := parentAcked() // the fallback's sales may follow
	_ = child.Wait()
	dir := srv.DataDir()
	require.NoError(t, os.RemoveAll(dir))
	require.NoError(t, os.Rename(older, dir))
	srv.Start()
	gap := time.Since(killed)

	close(stop)
	wg.Wait()
	<-childDone // every sale the child reported is counted
	atKill := childTotal() + parentAtKill
	var forgotten int64
	for i, sku := range skus {
		s := sellers[sku]
		require.True(t, s.sell(ctx, t, sku, -1, 0, nil), "%s sold out", sku)
		r := fenceFigures(ctx, t, m, "two processes, "+sku, sku, initial, s.acked.Load()+childAcked[i].Load(), s.failed.Load())
		assert.Zero(t, r.over, "%s oversold", sku)
		assert.True(t, r.restarted, "the survivor saw the restart")
		assert.LessOrEqual(t, r.forgotten, r.reported, "%s: the recovery reported (as lost) every move Redis forgot", sku)
		forgotten += r.forgotten
	}
	t.Logf("FIGURES two processes: Redis down %v (SIGKILL to serving again, AOF swap included); acknowledged after the copy %d, forgotten %d; the child acknowledged %d in all",
		gap.Round(time.Millisecond), atKill-atCopy, forgotten, childTotal())
	assert.Positive(t, forgotten, "the restored Redis forgot moves (else the test shows nothing)")
	assert.LessOrEqual(t, forgotten, atKill-atCopy, "only moves made after the copy were forgotten")
}

// startChild runs the test binary again as TestFenceTwoProcesses's child,
// selling spec's SKUs, and returns it, its acknowledged sales per SKU,
// counted as the child reports them, and a channel closed once the child
// is gone and every report counted (a byte per sale, the SKU's index, on
// its fd 3). A sale the child had not yet reported when it died is not
// counted: nobody outside it heard of it.
func startChild(t *testing.T, spec childSpec) (*exec.Cmd, []*atomic.Int64, <-chan struct{}) {
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	r, w, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^TestFenceTwoProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), fenceChildEnv+"="+string(b))
	log, err := os.Create(filepath.Join(t.TempDir(), "child.log"))
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	w.Close()
	acked := make([]*atomic.Int64, len(spec.SKUs))
	for i := range acked {
		acked[i] = new(atomic.Int64)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 256)
		for {
			n, err := r.Read(buf)
			for _, c := range buf[:n] {
				acked[c].Add(1)
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-done
		r.Close()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("child's output:\n%s", out)
		}
	})
	return cmd, acked, done
}

// fenceChild is the child process of TestFenceTwoProcesses: a Manager
// over the parent's Redis, keys and tables, with no syncer, selling a
// unit of each SKU in turn until it is killed, reporting each sale on
// fd 3.
func fenceChild(t *testing.T, raw string) {
	var spec childSpec
	require.NoError(t, json.Unmarshal([]byte(raw), &spec))
	report := os.NewFile(3, "acked")
	rdb := redis.NewClient(&redis.Options{Addr: spec.Addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	defer rdb.Close()
	m, err := New(rdb, testenv.MySQL(t), append(fenceOpts(), WithPrefix(spec.Prefix), WithTablePrefix(spec.Tables))...)
	require.NoError(t, err)
	defer m.Close()
	ctx := ctxT(t, time.Minute) // a bound for a parent that died without killing it
	for i := 0; ctx.Err() == nil; i++ {
		k := i % len(spec.SKUs)
		_, err := m.Reduce(ctx, spec.SKUs[k], 1)
		if err == nil {
			_, err = report.Write([]byte{byte(k)})
			require.NoError(t, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestFenceManagerStartedAfterRestart restores a private Redis from an
// older append-only file while no Manager runs (the one that sold has
// closed), then starts a new Manager, over a client that already trusts
// the restored server: it has no run_id of its own to compare, but the
// stamp that came back with the old data names the old server, so its
// first command fences the restored Redis, and selling out never passes
// the stock. The recovery stamps the new
// run_id: a third Manager started then trusts the server, with no
// recovery.
func TestFenceManagerStartedAfterRestart(t *testing.T) {
	srv := faulttest.StartRedis(t)
	client := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	e := newEnv(t, client(), testenv.MySQL(t))
	ctx := ctxT(t, 40*time.Second)
	const sku, initial = fenceSKU, fenceInitial
	first := e.manager(t, fenceOpts()...)
	s := startSale(ctx, t, first)
	older := filepath.Join(t.TempDir(), "older")
	copyDir(t, srv.DataDir(), older)
	s.sell(ctx, t, sku, 90, 0, nil)
	first.Close()
	srv.Kill()
	copyDir(t, older, srv.DataDir())
	srv.Start()

	open := func(rdb *redis.Client) *Manager {
		return (&env{rdb: rdb, db: e.db, prefix: e.prefix, tables: e.tables}).manager(t, fenceOpts()...)
	}
	// The client first serves a Manager whose keys have no stamp, so it
	// trusts the server, and the new Manager's first command reads its
	// own stamp.
	rdb := client()
	other := newEnv(t, rdb, e.db).manager(t, fenceOpts()...)
	require.NoError(t, other.Init(ctx, "other", 10))
	_, err := other.Reduce(ctx, "other", 1)
	require.NoError(t, err)
	second := open(rdb)
	syncing(t, second)
	s.m = second
	require.True(t, s.sell(ctx, t, sku, -1, 0, nil), "sold out")
	r := fenceFigures(ctx, t, second, "Manager started after the restore", sku, initial, s.acked.Load(), s.failed.Load())
	assert.Zero(t, r.over, "oversold")
	assert.True(t, r.restarted, "the stamp told the new Manager of the restart")
	assert.Positive(t, r.forgotten, "the restored Redis forgot sales")
	assert.LessOrEqual(t, r.forgotten, r.reported, "and the recovery reported them as lost")

	// The recovery stamped the new server: a Manager started now trusts it.
	require.Eventually(t, func() bool {
		id, err := second.rdb.Get(ctx, second.stampKey()).Result()
		info, _ := second.rdb.Info(ctx, "server").Result()
		run, _ := infoField(info, "run_id")
		return err == nil && id == strings.TrimSpace(run)
	}, 20*time.Second, 20*time.Millisecond, "the new run_id stamped")
	third := open(client())
	left, err := third.Get(ctx, sku)
	require.NoError(t, err)
	assert.Zero(t, left)
	recs, _, _ := third.Recoveries()
	assert.Empty(t, recs, "no fence on a server whose stamp is its own")
	recs, _, _ = other.Recoveries()
	assert.Empty(t, recs, "nor on the Manager over the same client whose keys were not restored")
}
