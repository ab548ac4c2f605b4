package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/redis/go-redis/v9"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/integration/internal/benchcmp"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/tiered"
)

// tieredChunk and tieredLowWater are the grants of the tiered Manager under
// comparison: at tens of thousands of calls per second, a chunk lasts long
// enough for its background refill to land before the allotment runs out.
const tieredChunk, tieredLowWater = 20000, 10000

// BenchmarkTiered compares tiered's Reduce (Redis in front of MariaDB, its
// calls merged as by default, a syncer running in the same process) with
// luascript's (merged, as by default) on the same Redis, on one hot SKU
// (64 and 256 goroutines) and on 64 spread SKUs (64 goroutines); and with
// optimistic on MariaDB, on one hot row (64 goroutines). The stock never
// runs out.
func BenchmarkTiered(b *testing.B) {
	ctx := context.Background()
	c := testenv.Redis(b)
	prefix := testenv.RedisPrefix(b, c)
	client := redis.NewClient(&redis.Options{Addr: c.Options().Addr, PoolSize: 256, ContextTimeoutEnabled: true})
	b.Cleanup(func() { client.Close() })
	db := testenv.MySQL(b)
	fillPool(b, db, sqlConns)
	tables := testenv.Prefix() + "_"
	tm, err := tiered.New(client, db, tiered.WithPrefix(prefix+"t"), tiered.WithTablePrefix(tables),
		tiered.WithChunk(tieredChunk), tiered.WithLowWater(tieredLowWater))
	if err != nil {
		b.Fatal(err)
	}
	if err := tm.CreateTables(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dropTiered(b, db, tables) })
	b.Cleanup(func() { tm.Close() })
	syncCtx, stop := context.WithCancel(ctx)
	synced := make(chan struct{})
	go func() { defer close(synced); _ = tm.Run(syncCtx) }()
	b.Cleanup(func() { stop(); <-synced }) // before Close and the drop
	lm, err := luascript.New(client, luascript.WithPrefix(prefix+"l"), luascript.WithKeyTTL(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	skus := map[layout][]string{}
	for _, l := range []layout{hot, spread} {
		skus[l] = l.names("tiered")
		for _, s := range skus[l] {
			if err := tm.Init(ctx, s, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
			if err := lm.Init(ctx, s, inventory.MaxStock); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := tm.Warm(ctx, skus[l]...); err != nil {
			b.Fatal(err)
		}
	}
	var sq *sqlBench
	for _, e := range sqltest.Benched {
		if e.Name == "mariadb" {
			sq = openSQL(b, e)
		}
	}
	opt, err := optimistic.New(sq.db, optimistic.WithSchema(sq.schema))
	if err != nil {
		b.Fatal(err)
	}
	stalls := func() string {
		return fmt.Sprintf("tiered: chunk %d, low water %d; %d stalls and %d refill failures so far", tieredChunk, tieredLowWater, tm.Stalls(), tm.RefillFailures())
	}
	type row struct {
		name string
		l    layout
		gs   []int
		base func(l layout) benchcmp.Side
	}
	rows := []row{
		{"hot, vs luascript", hot, []int{64, 256}, func(l layout) benchcmp.Side {
			return managerSide("luascript, merged (default)", []inventory.StockManager{lm}, skus[l], &gaveUp{})
		}},
		{"spread, vs luascript", spread, []int{64}, func(l layout) benchcmp.Side {
			return managerSide("luascript, merged (default)", []inventory.StockManager{lm}, skus[l], &gaveUp{})
		}},
		{"hot, vs optimistic MariaDB", hot, []int{64}, func(l layout) benchcmp.Side {
			return managerSide("optimistic, MariaDB", []inventory.StockManager{opt}, sq.skus[l], &gaveUp{})
		}},
	}
	for _, r := range rows {
		for _, g := range r.gs {
			gu := &gaveUp{extra: stalls}
			benchcmp.Run(b, benchcmp.Case{
				Group: "tiered", Name: r.name, Layout: r.l.String(), Goroutines: g,
				Strategy: managerSide("tiered (Redis + MariaDB, merged, syncer running)", []inventory.StockManager{tm}, skus[r.l], gu),
				Baseline: r.base(r.l),
				Note:     gu.note,
			})
		}
	}
}

// dropTiered drops the tables of db whose names begin with prefix:
// tiered's (MariaDB, PostgreSQL or SQLite).
func dropTiered(b *testing.B, db *sqlx.DB, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	list, quote := `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?`, "`"
	switch db.DriverName() {
	case "pgx":
		list, quote = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE $1`, `"`
	case "sqlite":
		list, quote = `SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE ? ESCAPE '\'`, `"`
	}
	var names []string
	err := db.SelectContext(ctx, &names, list, strings.ReplaceAll(prefix, "_", `\_`)+"%")
	if err == nil && len(names) == 0 {
		err = fmt.Errorf("no table begins with %s", prefix)
	}
	for _, n := range names {
		if err == nil {
			_, err = db.ExecContext(ctx, "DROP TABLE IF EXISTS "+quote+n+quote)
		}
	}
	if err != nil {
		b.Errorf("drop tiered's tables: %v", err)
	}
}
