//go:build drills

package drills

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietRedis{}) // every failover fills go-redis's log with dial errors the sale counts anyway
	code := m.Run()
	printTable(os.Stdout)
	if code == 0 {
		// Closed clients' goroutines (go-redis, go-zookeeper) end shortly
		// after Close: goleak.Find retries until they have.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// quietRedis drops go-redis's log.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// row is one line of the drills' table.
type row struct {
	drill, strategy, options string
	sold, oversold, lost     int64
	twice, failed            int64
	recovery                 time.Duration
	longest                  time.Duration // the longest a call waited for its verdict
	late                     time.Duration // the most a call ran past its deadline, net of the scheduler
	doubles                  int64         // zklock's double holders; -1 where no probe ran
	load                     string        // /proc/loadavg's first three figures at the end of the drill
	missed                   []string      // the targets missed
}

var (
	rowsMu sync.Mutex
	rows   []row
)

func record(r row) {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	rows = append(rows, r)
}

// loadavg returns the 1, 5 and 15 minute load averages.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func printTable(w io.Writer) {
	rowsMu.Lock()
	defer rowsMu.Unlock()
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFailover drills (1s call deadline; DeadlineSlack %v; late is net of the scheduler's delay)\n\n", inventory.DeadlineSlack)
	fmt.Fprintln(w, "| drill | strategy | options | sold | oversold | lost | keys applied twice | calls failed | time until calls succeed again | longest wait for a verdict | late | double holders | load avg | target |")
	fmt.Fprintln(w, "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |")
	for _, r := range rows {
		doubles := "-"
		if r.doubles >= 0 {
			doubles = fmt.Sprint(r.doubles)
		}
		back := r.recovery.Round(10 * time.Millisecond).String()
		if r.recovery < 0 {
			back = "never"
		}
		target := "met"
		if len(r.missed) > 0 {
			target = "MISSED: " + strings.Join(r.missed, "; ")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %d | %d | %d | %d | %v | %v | %v | %s | %s | %s |\n",
			r.drill, r.strategy, r.options, r.sold, r.oversold, r.lost, r.twice, r.failed,
			back, r.longest.Round(10*time.Millisecond), max(r.late, 0).Round(time.Millisecond), doubles, r.load, target)
	}
}
