package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // registers "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"
	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/testenv"
)

func TestMain(m *testing.M) { benchcmp.Main(m, versions) }

// goroutines are the concurrency levels most comparisons run at.
var goroutines = []int{16, 64, 256}

// layout is a SKU layout: one hot SKU, or calls spread at random over SKUs.
type layout struct {
	name string // "hot" or "spread"
	skus int
}

var (
	hot    = layout{"hot", 1}
	spread = layout{"spread", 64}
)

// String is the layout as the table shows it.
func (l layout) String() string {
	if l.skus == 1 {
		return "1 hot"
	}
	return fmt.Sprintf("%d spread", l.skus)
}

// names returns the layout's SKU names, distinct per prefix.
func (l layout) names(prefix string) []string {
	s := make([]string, l.skus)
	for i := range s {
		s[i] = fmt.Sprintf("%s-%s-%d", prefix, l.name, i)
	}
	return s
}

// pick returns one of skus at random.
func pick(rng *rand.Rand, skus []string) string { return skus[rng.IntN(len(skus))] }

// versions asks each server for its version.
func versions() (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v := map[string]string{}
	var errs []error
	ask := func(name string, f func() (string, error)) {
		s, err := f()
		if err != nil {
			s = "unknown"
			errs = append(errs, fmt.Errorf("%s: %w", name, err))
		}
		v[name] = s
	}
	ask("Redis", func() (string, error) {
		c := redis.NewClient(&redis.Options{Addr: testenv.Get(testenv.EnvRedis, testenv.DefaultRedis)})
		defer c.Close()
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(info, "\n") {
			if s, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				return s, nil
			}
		}
		return "", errors.New("no redis_version in INFO server")
	})
	sqlVersion := func(driver, dsn, query string) func() (string, error) {
		return func() (string, error) {
			db, err := sqlx.Open(driver, dsn)
			if err != nil {
				return "", err
			}
			defer db.Close()
			var s string
			if err := db.GetContext(ctx, &s, query); err != nil {
				return "", err
			}
			s, _, _ = strings.Cut(s, "-") // 10.11.19-MariaDB-0+deb12u1
			s, _, _ = strings.Cut(s, " ") // 15.18 (Debian 15.18-0+deb12u1)
			return s, nil
		}
	}
	ask("MariaDB", sqlVersion("mysql", testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL), "SELECT VERSION()"))
	ask("PostgreSQL", sqlVersion("pgx", testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres), "SHOW server_version"))
	ask("ZooKeeper", func() (string, error) {
		// The srvr four-letter word (whitelisted by default); go-zookeeper's
		// FLWSrvr cannot parse 3.8's answer.
		addr := testenv.List(testenv.EnvZooKeeper, testenv.DefaultZooKeeper)[0]
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return "", err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte("srvr")); err != nil {
			return "", err
		}
		out, err := io.ReadAll(conn)
		if err != nil {
			return "", err
		}
		for _, line := range strings.Split(string(out), "\n") {
			if s, ok := strings.CutPrefix(line, "Zookeeper version: "); ok {
				s, _, _ = strings.Cut(s, "-")
				return s, nil
			}
		}
		return "", fmt.Errorf("srvr answered %q", out)
	})
	return v, errors.Join(errs...)
}
