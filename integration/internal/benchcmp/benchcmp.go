// Package benchcmp compares a strategy with the naive form it replaces, on
// the same servers, in the same run, in alternating rounds.
//
// A comparison is a [Case]: two [Side]s (the strategy and its baseline), a
// goroutine count and a SKU layout. [Run] measures it as a sub-benchmark:
// after a short warm-up of each side, it runs Rounds rounds; in each round
// both sides run for the same fixed duration (or the same fixed op count) at
// the same concurrency, one after the other, the side that goes first
// alternating from round to round. Each round gives one ratio (strategy
// ops/s over baseline ops/s); the result is the median ratio with its min
// and max over the rounds, and each side's median ops/s. A noisy machine
// widens the min-max; it does not move the median much.
//
// Results are collected for the whole test binary: [Main], called from a
// TestMain, writes them as JSON (flag -benchcmp.out) with the machine and
// server versions, and the benchtable command (./benchtable) turns one such
// file into the table of docs/benchmarks.md, checking its ratios against a
// second run.
//
// Flags (after -args on the go test command line):
//
//	-benchcmp.rounds N    rounds per case (default 10, at least 1)
//	-benchcmp.round D     duration of each side's turn in a round (default 500ms)
//	-benchcmp.ops N       fixed op count per turn instead of a duration (default 0: use -benchcmp.round)
//	-benchcmp.warmup D    warm-up of each side before the rounds (default 200ms)
//	-benchcmp.out FILE    write the results of the run to FILE as JSON
package benchcmp

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Op is one call of a side: it takes one unit (or does one protected
// decrement) and returns nil on success. w is the index of the goroutine
// making the call (0..Goroutines-1) and rng that goroutine's own random
// source, so an Op needs no locking to pick a SKU. An error stops the round
// and fails the case: an Op that expects an error (ErrContention under load,
// say) handles it itself, retrying or counting it as its caller would.
type Op func(ctx context.Context, w int, rng *rand.Rand) error

// Side is one of the two things a Case compares.
type Side struct {
	// Name is what the table calls it, e.g. "luascript, keyed" or
	// "bare check-and-DECRBY EVALSHA".
	Name string
	// Op is one call.
	Op Op
	// Turn, if not nil, replaces Op: it runs a whole turn itself from g
	// connections (an external load generator such as redis-benchmark) for
	// about d, or for ops calls when ops > 0, and returns the calls per
	// second it measured.
	Turn func(ctx context.Context, g int, d time.Duration, ops int) (float64, error)
	// Reset, if not nil, runs before each of this side's turns (and its
	// warm-up), untimed: to restore stock a turn may use up, say.
	Reset func(ctx context.Context) error
}

// Case is one comparison, one row of the table of docs/benchmarks.md.
type Case struct {
	// Group is the table the row belongs to, e.g. "luascript", "SQL",
	// "locks". Rows of one group are printed together, in run order.
	Group string
	// Name names the row within its group, e.g. "MariaDB, hot" or
	// "hot, unkeyed". Group, Name and Goroutines identify the row across
	// runs, so keep them stable.
	Name string
	// Layout is the SKU layout, e.g. "1 hot SKU" or "64 spread SKUs".
	Layout string
	// Goroutines is the number of goroutines each side calls its Op from.
	Goroutines int
	// Strategy and Baseline are the two sides; the ratio is
	// Strategy's ops/s over Baseline's.
	Strategy, Baseline Side
	// Note, if not nil, is called after the rounds for a short note the
	// table prints beside the row (e.g. "0.1% of calls gave up").
	Note func() string
	// TurnScale, if above 1, makes each turn of this case (and its
	// warm-up) TurnScale times the configured duration or op count: for
	// slow cases (hundreds of ops/s, lock waits near a second) whose
	// per-round ratio a short turn leaves noisy. The table notes it.
	TurnScale int
}

// ID identifies c's row across runs: Group/Name/g=Goroutines.
func (c Case) ID() string { return c.Group + "/" + c.Name + "/g=" + strconv.Itoa(c.Goroutines) }

// Result is what Run measured for one Case.
type Result struct {
	Group, Name, Layout string
	Goroutines          int
	Strategy, Baseline  string // the sides' names
	// Ratios are the per-round ratios (strategy ops/s / baseline ops/s),
	// StrategyOps and BaselineOps the per-round ops/s, in round order.
	Ratios, StrategyOps, BaselineOps []float64
	// Median, Min and Max summarise Ratios.
	Median, Min, Max float64
	// Load1 is the 1-minute load average when the case started.
	Load1 float64
	Note  string `json:",omitempty"`
	// Err is set when the case failed; the other figures are then partial.
	Err string `json:",omitempty"`
}

// ID identifies r's row across runs, as Case.ID.
func (r Result) ID() string { return r.Group + "/" + r.Name + "/g=" + strconv.Itoa(r.Goroutines) }

// StrategyMedian is the median of StrategyOps.
func (r Result) StrategyMedian() float64 { return Median(r.StrategyOps) }

// BaselineMedian is the median of BaselineOps.
func (r Result) BaselineMedian() float64 { return Median(r.BaselineOps) }

// Config says how long Run measures.
type Config struct {
	Rounds int           // rounds per case, at least 1
	Round  time.Duration // each side's turn in a round, when Ops is 0
	Ops    int           // each side's turn as a fixed op count, when > 0
	Warmup time.Duration // each side's warm-up before the rounds
}

var (
	flagRounds = flag.Int("benchcmp.rounds", 10, "benchcmp: rounds per case")
	flagRound  = flag.Duration("benchcmp.round", 500*time.Millisecond, "benchcmp: duration of each side's turn in a round")
	flagOps    = flag.Int("benchcmp.ops", 0, "benchcmp: fixed op count per turn (instead of -benchcmp.round)")
	flagWarmup = flag.Duration("benchcmp.warmup", 200*time.Millisecond, "benchcmp: warm-up of each side before the rounds")
	flagOut    = flag.String("benchcmp.out", "", "benchcmp: write the run's results to this JSON file")
)

// FlagConfig is the Config the command-line flags give.
func FlagConfig() Config {
	return Config{Rounds: *flagRounds, Round: *flagRound, Ops: *flagOps, Warmup: *flagWarmup}
}

func (cfg Config) check() error {
	switch {
	case cfg.Rounds < 1:
		return fmt.Errorf("benchcmp: %d rounds, want at least 1", cfg.Rounds)
	case cfg.Ops < 0:
		return fmt.Errorf("benchcmp: %d ops per turn, want 0 (use the duration) or more", cfg.Ops)
	case cfg.Ops == 0 && cfg.Round <= 0:
		return fmt.Errorf("benchcmp: round of %v, want a positive duration", cfg.Round)
	}
	return nil
}

// results collects every Result of the test binary, for Main.
var results struct {
	sync.Mutex
	list []Result
}

// Run measures c as a sub-benchmark of b named after c.ID (without the
// group), with the Config the flags give, and records its result for Main.
// It reports the median ratio ("ratio"), its min and max ("ratio-min",
// "ratio-max") and both sides' median ops/s ("ops/s", "base-ops/s") as
// benchmark metrics. Run it with -benchtime 1x: the case runs once whatever
// b.N is.
func Run(b *testing.B, c Case) {
	b.Helper()
	b.Run(c.Name+"/g="+strconv.Itoa(c.Goroutines), func(b *testing.B) {
		r, err := Measure(context.Background(), FlagConfig(), c)
		if err != nil {
			r.Err = err.Error()
			b.Error(err)
		}
		results.Lock()
		results.list = append(results.list, r)
		results.Unlock()
		if err != nil {
			return
		}
		b.ReportMetric(r.Median, "ratio")
		b.ReportMetric(r.Min, "ratio-min")
		b.ReportMetric(r.Max, "ratio-max")
		b.ReportMetric(r.StrategyMedian(), "ops/s")
		b.ReportMetric(r.BaselineMedian(), "base-ops/s")
		b.ReportMetric(0, "ns/op") // one case per run: ns/op means nothing here
	})
}

// Measure runs c as Run does, without a benchmark around it, and returns
// what it measured.
func Measure(ctx context.Context, cfg Config, c Case) (Result, error) {
	r := Result{Group: c.Group, Name: c.Name, Layout: c.Layout, Goroutines: c.Goroutines,
		Strategy: c.Strategy.Name, Baseline: c.Baseline.Name, Load1: load1()}
	if err := cfg.check(); err != nil {
		return r, err
	}
	if c.Goroutines < 1 || (c.Strategy.Op == nil && c.Strategy.Turn == nil) || (c.Baseline.Op == nil && c.Baseline.Turn == nil) {
		return r, fmt.Errorf("benchcmp: case %s needs Goroutines >= 1 and an Op or Turn for each side", c.ID())
	}
	var notes []string
	if c.TurnScale > 1 {
		cfg.Round *= time.Duration(c.TurnScale)
		cfg.Ops *= c.TurnScale
		cfg.Warmup *= time.Duration(c.TurnScale)
		notes = append(notes, fmt.Sprintf("rounds %dx as long (a slow server)", c.TurnScale))
	}
	if cfg.Warmup > 0 {
		for _, s := range []Side{c.Strategy, c.Baseline} {
			if _, err := turn(ctx, s, c.Goroutines, Config{Round: cfg.Warmup}, 0); err != nil {
				return r, fmt.Errorf("%s: warm-up of %s: %w", c.ID(), s.Name, err)
			}
		}
	}
	for i := range cfg.Rounds {
		sides := []Side{c.Strategy, c.Baseline}
		order := []int{0, 1}
		if i%2 == 1 {
			order = []int{1, 0}
		}
		var ops [2]float64
		for _, k := range order {
			n, err := turn(ctx, sides[k], c.Goroutines, cfg, uint64(i+1))
			if err != nil {
				return r, fmt.Errorf("%s: round %d, %s: %w", c.ID(), i+1, sides[k].Name, err)
			}
			ops[k] = n
		}
		r.StrategyOps = append(r.StrategyOps, ops[0])
		r.BaselineOps = append(r.BaselineOps, ops[1])
		r.Ratios = append(r.Ratios, ops[0]/ops[1])
	}
	r.Median, r.Min, r.Max = Median(r.Ratios), slices.Min(r.Ratios), slices.Max(r.Ratios)
	if c.Note != nil {
		if n := c.Note(); n != "" {
			notes = append(notes, n)
		}
	}
	r.Note = strings.Join(notes, "; ")
	return r, nil
}

// MinCalls is the fewest calls a timed turn counts: a turn whose duration
// is up before MinCalls calls have ended goes on until they have, so that
// no ratio rests on a handful of calls (or divides by none).
const MinCalls = 20

// turn runs s from g goroutines for cfg.Ops calls, or for cfg.Round (and
// at least MinCalls calls), and returns its calls per second. With a
// duration, only the calls that end within the turn count, divided by its
// length; the calls still running when it ends are waited for, untimed.
// seed varies the goroutines' random sources from turn to turn; both sides
// of a round get the same ones.
func turn(ctx context.Context, s Side, g int, cfg Config, seed uint64) (float64, error) {
	if s.Reset != nil {
		if err := s.Reset(ctx); err != nil {
			return 0, fmt.Errorf("reset: %w", err)
		}
	}
	if s.Turn != nil {
		return s.Turn(ctx, g, cfg.Round, cfg.Ops)
	}
	var (
		stop     atomic.Bool  // no goroutine starts another call
		ended    atomic.Bool  // the timed turn is over: no call counts
		length   atomic.Int64 // of the timed turn, once ended
		next     atomic.Int64
		done     atomic.Int64
		firstErr error
		errOnce  sync.Once
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err })
		stop.Store(true)
	}
	start := time.Now()
	end := func() {
		if ended.CompareAndSwap(false, true) {
			length.Store(int64(time.Since(start)))
			stop.Store(true)
		}
	}
	if cfg.Ops == 0 {
		t := time.AfterFunc(cfg.Round, func() {
			if done.Load() >= MinCalls {
				end()
			}
		})
		defer t.Stop()
	}
	for w := range g {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		wg.Go(func() {
			for !stop.Load() {
				if cfg.Ops > 0 && next.Add(1) > int64(cfg.Ops) {
					return
				}
				if err := s.Op(ctx, w, rng); err != nil {
					fail(err)
					return
				}
				switch {
				case cfg.Ops > 0:
					done.Add(1)
				case !ended.Load():
					if done.Add(1) >= MinCalls && time.Since(start) >= cfg.Round {
						end()
					}
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	if cfg.Ops > 0 {
		return float64(done.Load()) / time.Since(start).Seconds(), nil
	}
	return float64(done.Load()) / time.Duration(length.Load()).Seconds(), nil
}

// Median returns the median of xs (the mean of the two middle values for
// an even count), or 0 for none. It does not modify xs.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// load1 reads the 1-minute load average, or 0 where there is none.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	return f
}

// Main runs the tests and benchmarks of m, then, when -benchcmp.out names a
// file, writes there the results of every case with env (the machine and
// the servers' versions, as collected by the caller) and exits. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { benchcmp.Main(m, versions) }
//
// versions is called once, after the run, only when there are results to
// write; it returns server name -> version ("Redis" -> "7.0.15"), and an
// error for a server it could not ask (the version is then "unknown").
func Main(m *testing.M, versions func() (map[string]string, error)) {
	env := Machine()
	code := m.Run()
	if *flagOut != "" {
		results.Lock()
		list := slices.Clone(results.list)
		results.Unlock()
		slices.SortStableFunc(list, func(a, b Result) int { return cmp.Compare(firstRun(list, a.Group), firstRun(list, b.Group)) })
		env.End = time.Now().UTC()
		env.Load1End = load1()
		env.Config = FlagConfig()
		if versions != nil {
			v, err := versions()
			env.Versions = v
			if err != nil {
				fmt.Fprintln(os.Stderr, "benchcmp: versions:", err)
			}
		}
		if len(list) == 0 {
			fmt.Fprintln(os.Stderr, "benchcmp: no case ran")
		}
		if err := WriteReport(*flagOut, Report{Env: env, Results: list}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = cmp.Or(code, 1)
		}
		if code == 0 && slices.ContainsFunc(list, func(r Result) bool { return r.Err != "" }) {
			code = 1
		}
	}
	os.Exit(code)
}

// firstRun is the index of group's first result in list: groups keep the
// order in which they first ran.
func firstRun(list []Result, group string) int {
	return slices.IndexFunc(list, func(r Result) bool { return r.Group == group })
}
