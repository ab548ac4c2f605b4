package tiered

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/faulttest"
	"github.com/stockkit/inventory/internal/testenv"
)

// recoverNow ends the open period of m's circuit, starts the recovery and
// waits until it has closed the circuit; it returns what it found.
func (m *Manager) recoverNow(ctx context.Context, t *testing.T) Recovery {
	t.Helper()
	m.br.mu.Lock()
	require.NotEqual(t, brClosed, m.br.state, "the circuit is open")
	m.br.until = time.Time{}
	m.br.mu.Unlock()
	return m.awaitRecovery(ctx, t)
}

// awaitRecovery calls Get on nothing in particular until the circuit is
// closed (a call after the open period starts the recovery), and returns
// the last recovery.
func (m *Manager) awaitRecovery(ctx context.Context, t *testing.T) Recovery {
	t.Helper()
	for {
		m.br.open() // starts the recovery once the open period is over
		m.br.mu.Lock()
		state, done := m.br.state, m.br.done
		m.br.mu.Unlock()
		if state == brClosed {
			break
		}
		select {
		case <-done:
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			_, n, err := m.Recoveries()
			t.Fatalf("circuit still open: %v (%d recoveries failed, last: %v)", ctx.Err(), n, err)
		}
	}
	recs, _, _ := m.Recoveries()
	require.NotEmpty(t, recs)
	return recs[len(recs)-1]
}

// logFigures logs the figures of a fault in one line (the note
// quotes them) and checks the invariant across SQL and Redis after the
// recovery: units taken (Redis's synced sales and SQL's own) less returned,
// plus left (SQL's pool and Redis's allotment), plus the allotment recorded
// lost, is the initial stock; Redis's allotment is the grants less the net
// sales and the units lost; and no more units were sold than there were
// (acked: the Reduces that returned nil).
func logFigures(t *testing.T, fault, sku string, s totals, initial, acked int64, recs []Recovery, final []Drift) {
	t.Helper()
	var lost, excess, grants, views int64
	for _, r := range recs {
		for _, d := range r.Drifts {
			if d.SKU != sku {
				continue
			}
			lost += d.Lost
			excess += d.Excess
			grants += d.GrantsApplied
			if d.ViewFixed {
				views++
			}
		}
	}
	for _, d := range final {
		if d.SKU != sku {
			continue
		}
		lost += d.Lost
		excess += d.Excess
		grants += d.GrantsApplied
	}
	taken := s.sold + s.direct
	left := s.pool + s.allot
	oversold := max(acked-initial, taken-s.returned-initial, 0)
	t.Logf("FIGURES %s: initial %d; taken %d (Redis %d, SQL fallback %d), returned %d, granted %d, left %d (SQL pool %d + Redis allotment %d), lost %d; oversold %d; acknowledged Reduces %d; Reconcile drift: lost %d, excess %d, grants applied %d, views fixed %d (%d recoveries)",
		fault, initial, taken, s.sold, s.direct, s.returned, s.granted, left, s.pool, s.allot, s.lost, oversold, acked, lost, excess, grants, views, len(recs))
	assert.Zero(t, oversold, "never oversold")
	assert.Equal(t, initial, s.sold+s.direct-s.returned+left+s.lost, "taken - returned + left + lost == initial: %+v", s)
	checkDrained(t, s, initial)
	assert.Equal(t, lost, s.lost, "every lost unit was reported by Reconcile")
}

// copyDir copies the directory src to dst (cp -a).
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.RemoveAll(dst))
	out, err := exec.Command("cp", "-a", src, dst).CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// sellDown makes n unkeyed Reduces of one unit while Redis is down, so that
// the breaker opens and the fallback sells.
func sellDown(ctx context.Context, t *testing.T, m *Manager, sku string, n int) {
	t.Helper()
	for sold, tries := 0, 0; sold < n; tries++ {
		require.Less(t, tries, n+100, "the fallback does not sell")
		_, err := m.Reduce(ctx, sku, 1)
		if err == nil {
			sold++
			continue
		}
		// Refused by a Redis that does not answer (not sent: the dial
		// failed), before the circuit opened.
		require.NotErrorIs(t, err, ErrFallback)
	}
	require.Positive(t, m.Fallbacks())
}

// privateManager starts a private Redis and returns it and a Manager made
// with opts over it (through a client that dials for 200ms at most and
// never resends) and db.
func privateManager(t *testing.T, db *sqlx.DB, opts ...Option) (*faulttest.Process, *Manager) {
	srv := faulttest.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return srv, newEnv(t, rdb, db).manager(t, opts...)
}

// sellEach makes n Reduces of one unit of each of skus, each acknowledged,
// and counts them in acked.
func sellEach(ctx context.Context, t *testing.T, m *Manager, acked map[string]int64, n int, skus ...string) {
	t.Helper()
	for _, sku := range skus {
		for range n {
			_, err := m.Reduce(ctx, sku, 1)
			require.NoError(t, err)
			acked[sku]++
		}
	}
}

// initAndSell inits each of skus with initial units, sells n of each
// (see sellEach) and drains m; it returns the sales acknowledged by SKU.
func initAndSell(ctx context.Context, t *testing.T, m *Manager, initial int64, n int, skus ...string) map[string]int64 {
	t.Helper()
	for _, sku := range skus {
		require.NoError(t, m.Init(ctx, sku, initial))
	}
	acked := map[string]int64{}
	sellEach(ctx, t, m, acked, n, skus...)
	require.NoError(t, m.Drain(ctx))
	return acked
}

// checkSoldOut sells each of skus out after the recovery rec, a unit at a
// time, counting the sales in acked, and drains m. Then each SKU
// reconciles clean, and want of its units were sold in all (msg says
// what that means, formatted with the SKU and its totals); logFigures
// logs the fault's figures and checks the invariant.
func checkSoldOut(ctx context.Context, t *testing.T, m *Manager, fault string, rec Recovery, initial, want int64,
	acked map[string]int64, msg string, skus ...string) {
	t.Helper()
	for _, sku := range skus {
		for {
			_, err := m.Reduce(ctx, sku, 1)
			if errors.Is(err, inventory.ErrInsufficientStock) {
				break
			}
			require.NoError(t, err)
			acked[sku]++
		}
	}
	require.NoError(t, m.Drain(ctx))
	for _, sku := range skus {
		final, err := m.Reconcile(ctx, sku)
		require.NoError(t, err)
		assert.True(t, final[0].Clean(), "%+v", final[0])
		s := m.totals(ctx, t, sku)
		assert.EqualValues(t, want, acked[sku], msg, sku, s)
		logFigures(t, fault+", SKU "+sku, sku, s, initial, acked[sku], []Recovery{rec}, final)
	}
}

// TestRecoveryOlderState restarts a private Redis from an older copy of
// its AOF (as an fsync policy other than always, or a restore, may leave
// it): Redis's allotment then includes units whose sales SQL has synced.
// The recovery sees the restart (Redis's uptime), reconciles every SKU,
// the untouched one too, and takes the excess out before Redis takes
// traffic again: selling out then never passes the stock.
func TestRecoveryOlderState(t *testing.T) {
	srv, m := privateManager(t, testenv.MySQL(t), WithChunk(50), WithLowWater(0), WithBreaker(1, 100*time.Millisecond), WithTrustRestarts())
	ctx := ctxT(t, time.Minute)
	const initial = 200
	acked := initAndSell(ctx, t, m, initial, 20, "a", "b")
	srv.Kill()
	dir := srv.DataDir()
	older := filepath.Join(t.TempDir(), "older")
	copyDir(t, dir, older)
	srv.Start()
	sellEach(ctx, t, m, acked, 10, "a", "b")
	require.NoError(t, m.Drain(ctx)) // SQL has synced 30 sales of each
	srv.Kill()
	sellDown(ctx, t, m, "a", 5) // "b" is left alone
	acked["a"] += 5
	copyDir(t, older, dir)
	srv.Start() // Redis: allotment 30 of its grant of 50, as after 20 sales

	rec := m.awaitRecovery(ctx, t)
	assert.True(t, rec.Restarted, "%+v", rec)
	require.Len(t, rec.Drifts, 2, "every SKU, not only the one the fallback moved: %+v", rec)
	for _, d := range rec.Drifts {
		assert.EqualValues(t, 10, d.Excess, "the 10 sales the older state forgot: %+v", d)
		assert.Zero(t, d.Lost, "%+v", d)
	}
	checkSoldOut(ctx, t, m, "Redis restarted from an older AOF", rec, initial, initial, acked, "%s sold out exactly: %+v", "a", "b")
}

// TestRecoveryRedisEmpty restarts a private Redis empty (its data removed)
// while the fallback sells one of two SKUs: the recovery sees the restart,
// reconciles both, records the allotments Redis lost, and the sale goes on
// from SQL's pool, never past the stock.
func TestRecoveryRedisEmpty(t *testing.T) {
	srv, m := privateManager(t, testenv.Postgres(t), WithChunk(40), WithLowWater(0), WithBreaker(2, 100*time.Millisecond))
	ctx := ctxT(t, time.Minute)
	const initial = 100
	acked := initAndSell(ctx, t, m, initial, 15, "a", "b")
	srv.Kill()
	sellDown(ctx, t, m, "a", 10)
	acked["a"] += 10
	require.NoError(t, os.RemoveAll(srv.DataDir()))
	require.NoError(t, os.Mkdir(srv.DataDir(), 0o755))
	srv.Start()

	rec := m.awaitRecovery(ctx, t)
	assert.True(t, rec.Restarted, "%+v", rec)
	require.Len(t, rec.Drifts, 2, "%+v", rec)
	for _, d := range rec.Drifts {
		assert.True(t, d.RedisMissing, "%+v", d)
		assert.EqualValues(t, 25, d.Lost, "the allotment left of the grant of 40: %+v", d)
	}
	checkSoldOut(ctx, t, m, "Redis restarted empty", rec, initial, initial-25, acked, "%s: all but the lost allotment sold: %+v", "a", "b")
}
