package benchcmp

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMedian(t *testing.T) {
	xs := []float64{3, 1, 2}
	assert.Equal(t, 2.0, Median(xs))
	assert.Equal(t, []float64{3, 1, 2}, xs, "Median must not sort its argument")
	assert.Equal(t, 2.5, Median([]float64{4, 1, 3, 2}))
	assert.Equal(t, 0.0, Median(nil))
}

// counting is a Side whose turns are recorded in order, and whose calls
// are counted.
type counting struct {
	name  string
	calls atomic.Int64
	order *[]string
	mu    *sync.Mutex
}

func (c *counting) side() Side {
	return Side{
		Name: c.name,
		Op: func(context.Context, int, *rand.Rand) error {
			c.calls.Add(1)
			return nil
		},
		Reset: func(context.Context) error {
			c.mu.Lock()
			*c.order = append(*c.order, c.name)
			c.mu.Unlock()
			return nil
		},
	}
}

func TestMeasureAlternatesAndCountsFixedOps(t *testing.T) {
	var order []string
	var mu sync.Mutex
	s := &counting{name: "s", order: &order, mu: &mu}
	base := &counting{name: "b", order: &order, mu: &mu}
	cfg := Config{Rounds: 4, Ops: 100}
	r, err := Measure(context.Background(), cfg, Case{Group: "g", Name: "n", Goroutines: 8, Strategy: s.side(), Baseline: base.side(),
		Note: func() string { return "noted" }})
	require.NoError(t, err)
	assert.Equal(t, []string{"s", "b", "b", "s", "s", "b", "b", "s"}, order, "the side going first alternates")
	assert.Equal(t, int64(400), s.calls.Load(), "exactly Ops calls per turn")
	assert.Equal(t, int64(400), base.calls.Load())
	assert.Len(t, r.Ratios, 4)
	assert.Len(t, r.StrategyOps, 4)
	assert.Len(t, r.BaselineOps, 4)
	for i := range r.Ratios {
		assert.InDelta(t, r.StrategyOps[i]/r.BaselineOps[i], r.Ratios[i], 1e-9)
	}
	assert.Equal(t, Median(r.Ratios), r.Median)
	assert.LessOrEqual(t, r.Min, r.Median)
	assert.GreaterOrEqual(t, r.Max, r.Median)
	assert.Equal(t, "noted", r.Note)
	assert.Equal(t, "g/n/g=8", r.ID())
}

func TestMeasureTurnScale(t *testing.T) {
	var order []string
	var mu sync.Mutex
	s := &counting{name: "s", order: &order, mu: &mu}
	base := &counting{name: "b", order: &order, mu: &mu}
	r, err := Measure(context.Background(), Config{Rounds: 2, Ops: 10}, Case{Group: "g", Name: "n", Goroutines: 3,
		Strategy: s.side(), Baseline: base.side(), TurnScale: 3, Note: func() string { return "x" }})
	require.NoError(t, err)
	assert.Equal(t, int64(60), s.calls.Load())
	assert.Equal(t, int64(60), base.calls.Load())
	assert.Equal(t, "rounds 3x as long (a slow server); x", r.Note)
}

func TestMeasureWarmsUpEachSide(t *testing.T) {
	var order []string
	var mu sync.Mutex
	s := &counting{name: "s", order: &order, mu: &mu}
	base := &counting{name: "b", order: &order, mu: &mu}
	_, err := Measure(context.Background(), Config{Rounds: 1, Ops: 10, Warmup: time.Millisecond},
		Case{Group: "g", Name: "n", Goroutines: 2, Strategy: s.side(), Baseline: base.side()})
	require.NoError(t, err)
	assert.Equal(t, []string{"s", "b", "s", "b"}, order)
}

func TestMeasureWithADurationStops(t *testing.T) {
	var calls atomic.Int64
	op := func(context.Context, int, *rand.Rand) error {
		calls.Add(1)
		time.Sleep(time.Millisecond)
		return nil
	}
	r, err := Measure(context.Background(), Config{Rounds: 2, Round: 20 * time.Millisecond},
		Case{Group: "g", Name: "n", Goroutines: 4, Strategy: Side{Name: "s", Op: op}, Baseline: Side{Name: "b", Op: op}})
	require.NoError(t, err)
	assert.Len(t, r.Ratios, 2)
	assert.Positive(t, calls.Load())
	for _, ops := range append(r.StrategyOps, r.BaselineOps...) {
		assert.Positive(t, ops)
	}
}

// A side with a Turn runs its own turns (an external load generator): it is
// given the goroutines, the turn's length and op count, and its rate is the
// one it reports; an error of a turn fails the case.
func TestMeasureTurnSide(t *testing.T) {
	type call struct {
		g   int
		d   time.Duration
		ops int
	}
	var calls []call
	ext := Side{Name: "ext", Turn: func(_ context.Context, g int, d time.Duration, ops int) (float64, error) {
		calls = append(calls, call{g, d, ops})
		return 50, nil
	}}
	op := func(context.Context, int, *rand.Rand) error { return nil }
	r, err := Measure(context.Background(), Config{Rounds: 2, Round: 5 * time.Millisecond, Warmup: time.Millisecond},
		Case{Group: "g", Name: "n", Goroutines: 3, Strategy: Side{Name: "s", Op: op}, Baseline: ext})
	require.NoError(t, err)
	assert.Equal(t, []call{{3, time.Millisecond, 0}, {3, 5 * time.Millisecond, 0}, {3, 5 * time.Millisecond, 0}}, calls)
	assert.Equal(t, []float64{50, 50}, r.BaselineOps)
	for i := range r.Ratios {
		assert.InDelta(t, r.StrategyOps[i]/50, r.Ratios[i], 1e-9)
	}

	boom := errors.New("boom")
	ext.Turn = func(context.Context, int, time.Duration, int) (float64, error) { return 0, boom }
	_, err = Measure(context.Background(), Config{Rounds: 1, Ops: 5},
		Case{Group: "g", Name: "n", Goroutines: 1, Strategy: Side{Name: "s", Op: op}, Baseline: ext})
	assert.ErrorIs(t, err, boom)
	_, err = Measure(context.Background(), Config{Rounds: 1, Ops: 5},
		Case{Group: "g", Name: "n", Goroutines: 1, Strategy: Side{Name: "s", Op: op}, Baseline: Side{Name: "none"}})
	assert.ErrorContains(t, err, "an Op or Turn")
}

// A timed turn whose time is up before MinCalls calls have ended goes on
// until they have, and counts them.
func TestMeasureCountsAtLeastMinCalls(t *testing.T) {
	var calls atomic.Int64
	slow := func(context.Context, int, *rand.Rand) error {
		calls.Add(1)
		time.Sleep(5 * time.Millisecond)
		return nil
	}
	r, err := Measure(context.Background(), Config{Rounds: 1, Round: time.Millisecond},
		Case{Group: "g", Name: "n", Goroutines: 1, Strategy: Side{Name: "s", Op: slow}, Baseline: Side{Name: "b", Op: slow}})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, calls.Load(), int64(2*MinCalls))
	for _, ops := range append(r.StrategyOps, r.BaselineOps...) {
		assert.Positive(t, ops)
		assert.False(t, math.IsInf(ops, 0))
	}
}

func TestMeasureFailsOnAnOpError(t *testing.T) {
	boom := errors.New("boom")
	var n atomic.Int64
	bad := Side{Name: "bad", Op: func(context.Context, int, *rand.Rand) error {
		if n.Add(1) == 5 {
			return boom
		}
		return nil
	}}
	good := Side{Name: "good", Op: func(context.Context, int, *rand.Rand) error { return nil }}
	_, err := Measure(context.Background(), Config{Rounds: 3, Ops: 10}, Case{Group: "g", Name: "n", Goroutines: 2, Strategy: good, Baseline: bad})
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "round 1, bad")

	resetErr := errors.New("reset failed")
	_, err = Measure(context.Background(), Config{Rounds: 3, Ops: 10}, Case{Group: "g", Name: "n", Goroutines: 2, Strategy: good,
		Baseline: Side{Name: "r", Op: good.Op, Reset: func(context.Context) error { return resetErr }}})
	require.ErrorIs(t, err, resetErr)
}

func TestMeasureRefusesBadConfigs(t *testing.T) {
	ok := Side{Name: "s", Op: func(context.Context, int, *rand.Rand) error { return nil }}
	c := Case{Group: "g", Name: "n", Goroutines: 1, Strategy: ok, Baseline: ok}
	for name, cfg := range map[string]Config{
		"no rounds":     {Rounds: 0, Ops: 1},
		"negative ops":  {Rounds: 1, Ops: -1},
		"no duration":   {Rounds: 1},
		"negative time": {Rounds: 1, Round: -time.Second},
	} {
		_, err := Measure(context.Background(), cfg, c)
		assert.Error(t, err, name)
	}
	bad := c
	bad.Goroutines = 0
	_, err := Measure(context.Background(), Config{Rounds: 1, Ops: 1}, bad)
	assert.Error(t, err)
	bad = c
	bad.Baseline.Op = nil
	_, err = Measure(context.Background(), Config{Rounds: 1, Ops: 1}, bad)
	assert.Error(t, err)
}

func result(name string, med, lo, hi float64) Result {
	return Result{Group: "locks", Name: name, Layout: "1 hot", Goroutines: 64, Strategy: "lib", Baseline: "naive",
		Ratios: []float64{lo, med, hi}, StrategyOps: []float64{2000, 2000, 2000}, BaselineOps: []float64{1000, 1000, 1000},
		Median: med, Min: lo, Max: hi}
}

func TestStable(t *testing.T) {
	a := result("x", 2, 1.8, 2.2)
	assert.True(t, Stable(a, result("x", 2.1, 1.9, 2.4)))
	assert.False(t, Stable(a, result("x", 2.5, 2.3, 2.6)), "a's median below b's min")
	assert.False(t, Stable(a, result("x", 1.9, 1.0, 1.95)), "a's median above b's max")
	assert.False(t, Stable(a, result("x", 2.3, 1.0, 3.0)), "b's median above a's max")
	failed := result("x", 2, 1.8, 2.2)
	failed.Err = "boom"
	assert.False(t, Stable(a, failed))
}

func TestTable(t *testing.T) {
	run := Report{
		Env: Env{Start: time.Date(2026, 12, 1, 17, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 1, 17, 9, 0, 0, time.UTC),
			NumCPU: 2, CPU: "AMD EPYC", Go: "go1.26.8", Versions: map[string]string{"Redis": "7.0.15", "MariaDB": "10.11.19"},
			Config: Config{Rounds: 5, Round: time.Second, Warmup: 200 * time.Millisecond}},
		Results: []Result{result("stable", 2, 1.8, 2.2), result("unstable", 2, 1.8, 2.2), result("missing", 1, 0.9, 1.1)},
	}
	run.Results[0].Note = "a note"
	alone := Table(run, nil)
	for _, want := range []string{"2026-12-01 17:00-17:09 UTC", "2 CPUs (nproc), AMD EPYC", "Go 1.26.8", "MariaDB 10.11.19, Redis 7.0.15",
		"5 rounds", "**locks**", "| lib | naive | 1 hot | 64 | **2.00** | 1.80-2.20 | 2,000 | 1,000 | a note |", "Not yet checked"} {
		assert.Contains(t, alone, want)
	}
	assert.NotContains(t, alone, "unstable**")

	check := Report{Env: run.Env, Results: []Result{result("stable", 2.1, 1.9, 2.3), result("unstable", 3, 2.9, 3.1)}}
	checked := Table(run, &check)
	assert.Contains(t, checked, "1 of 3 rows are stable")
	assert.Contains(t, checked, "| 2.10 (1.90-2.30) | stable |")
	assert.Contains(t, checked, "| 3.00 (2.90-3.10) | **unstable** |")
	assert.Contains(t, checked, "| not run | **unstable** |")
	assert.Equal(t, 3, strings.Count(checked, "| lib"))

	order := run
	order.Results = []Result{result("l", 1, 1, 1), result("s", 1, 1, 1), result("o", 1, 1, 1), result("u", 1, 1, 1)}
	order.Results[1].Group = "SQL"
	order.Results[2].Group = "other"
	order.Results[3].Group = "luascript"
	ordered := Table(order, nil)
	u, q, l, o := strings.Index(ordered, "**luascript**"), strings.Index(ordered, "**SQL**"), strings.Index(ordered, "**locks**"), strings.Index(ordered, "**other**")
	assert.True(t, 0 < u && u < q && q < l && l < o, "groups in GroupOrder, then the others:\n%s", ordered)

	failed := run
	failed.Results = []Result{result("failed", 0, 0, 0)}
	failed.Results[0].Err = "round 1: boom\nmore | text"
	assert.Contains(t, Table(failed, nil), "failed: round 1: boom more / text")
}

func TestReplaceBlock(t *testing.T) {
	doc := "# Title\n\nbefore\n" + BeginMarker + "\nold table\n" + EndMarker + "\nafter\n"
	out, err := ReplaceBlock(doc, "new table\n\n")
	require.NoError(t, err)
	assert.Equal(t, "# Title\n\nbefore\n"+BeginMarker+"\nnew table\n"+EndMarker+"\nafter\n", out)
	again, err := ReplaceBlock(out, "new table")
	require.NoError(t, err)
	assert.Equal(t, out, again, "replacing is idempotent")

	for _, bad := range []string{"no markers", BeginMarker + " only", EndMarker + "\n" + BeginMarker} {
		_, err := ReplaceBlock(bad, "x")
		assert.ErrorIs(t, err, ErrNoMarkers, bad)
	}
}

func TestFormats(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 0.0434: "0.043", 0.434: "0.43", 4.344: "4.34", 43.44: "43.4", 434.4: "434"} {
		assert.Equal(t, want, Ratio(x))
	}
	for x, want := range map[float64]string{0: "0", 12: "12", 999.6: "1,000", 12345: "12,345", 1234567: "1,234,567"} {
		assert.Equal(t, want, Ops(x))
	}
}

func TestReportRoundTrip(t *testing.T) {
	path := t.TempDir() + "/run.json"
	r := Report{Env: Machine(), Results: []Result{result("x", 2, 1, 3)}}
	require.NoError(t, WriteReport(path, r))
	got, err := ReadReport(path)
	require.NoError(t, err)
	assert.Equal(t, r.Results, got.Results)
	assert.Equal(t, r.Env.NumCPU, got.Env.NumCPU)
	assert.True(t, r.Env.Start.Equal(got.Env.Start))
	_, err = ReadReport(t.TempDir() + "/none.json")
	assert.Error(t, err)
}
