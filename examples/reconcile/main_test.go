package main

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stockkit/inventory/internal/rediskeys"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/tiered"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// reconcile, on the real servers, reports a clean SKU as clean and a SKU
// whose Redis state was lost as drift (status errDrift), which it repairs:
// a second run finds it clean.
func TestReconcile(t *testing.T) {
	for name, open := range map[string]func(testing.TB) *sqlx.DB{"mysql": testenv.MySQL, "postgres": testenv.Postgres} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rdb, db := testenv.Redis(t), open(t)
			p := testenv.Prefix()
			t.Cleanup(func() { testenv.DeleteKeys(t, rdb, p+"*") })
			sqltest.Drop(t, db, p+"_stock", p+"_grants", p+"_synced", p+"_keys")
			m, err := tiered.New(rdb, db, tiered.WithPrefix(p), tiered.WithTablePrefix(p+"_"), tiered.WithChunk(10))
			require.NoError(t, err)
			defer m.Close()
			require.NoError(t, m.CreateTables(ctx))
			for _, sku := range []string{"kept", "lost"} {
				require.NoError(t, m.Init(ctx, sku, 100))
				for range 5 {
					_, err := m.Reduce(ctx, sku, 1)
					require.NoError(t, err)
				}
			}
			require.NoError(t, m.Drain(ctx))
			// Redis loses the state of one SKU.
			require.NoError(t, rdb.Del(ctx, rediskeys.Stock(p, "lost")).Err())

			dsn := testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL)
			if name == "postgres" {
				dsn = testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres)
			}
			args := []string{"-redis", testenv.Get(testenv.EnvRedis, testenv.DefaultRedis), "-" + name, dsn,
				"-prefix", p, "-table-prefix", p + "_"}
			var out bytes.Buffer
			err = run(ctx, append(args, "kept", "lost"), &out, io.Discard)
			t.Logf("first run:\n%s", out.String())
			require.ErrorIs(t, err, errDrift)
			assert.Regexp(t, `(?m)^ +kept +1 +\d+ +\d+ +5 +0 +0 +0 .* clean\s*$`, out.String(), "kept: 5 sold, clean")
			assert.Regexp(t, `(?m)^ +lost .* true +DRIFT \(repaired\)\s*$`, out.String(), "lost: Redis missing, drift")

			out.Reset()
			require.NoError(t, run(ctx, args, &out, io.Discard), "repaired: every SKU clean\n%s", out.String())
			t.Logf("second run (every SKU):\n%s", out.String())
			assert.Regexp(t, `(?m)^ +lost .* clean\s*$`, out.String())
		})
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{}, {"-mysql", "x", "-postgres", "y"}, {"-nope"}} {
		assert.ErrorIs(t, run(context.Background(), args, io.Discard, io.Discard), errUsage, "%q", args)
	}
}
