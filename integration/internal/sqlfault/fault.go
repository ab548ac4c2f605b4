// Package sqlfault breaks the SQL test servers from inside a test: private
// pools to kill, proxies to add network faults, and the stall checks. It
// lives in the integration module because it uses toxiproxy (netfault).
package sqlfault

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stockkit/inventory/integration/internal/netfault"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/testenv"
	"github.com/stockkit/inventory/sqlstore"
)

// Server is a server engine that fault tests may break without disturbing
// other tests: the pools it opens are the test's own, and only theirs are
// killed.
type Server struct {
	Name string
	// Addr is the server's host:port, to put a proxy before it.
	Addr func(testing.TB) string
	// Open opens a pool of t's own on the test database through via (the
	// server itself or a proxy before it), and a pool on the shared login to
	// set up tables and kill.
	Open func(t testing.TB, via string) *Private
}

// Private is a pool whose connections belong to one test.
type Private struct {
	DB    *sqlx.DB // the test's own connections
	Admin *sqlx.DB // the shared test login, straight to the server
	// Kill ends every server connection of DB, as an administrator's kill
	// or a crashed backend would, and reports how many it ended.
	Kill func(ctx context.Context) (int, error)
}

// Servers are the engines with a server to break: MariaDB and PostgreSQL.
var Servers = []Server{
	{"mariadb", mysqlAddr, openMariaDB},
	{"postgres", pgAddr, openPostgres},
}

func mysqlConfig(t testing.TB) *mysql.Config {
	cfg, err := mysql.ParseDSN(testenv.Get(testenv.EnvMySQL, testenv.DefaultMySQL))
	require.NoError(t, err)
	return cfg
}

func mysqlAddr(t testing.TB) string { return mysqlConfig(t).Addr }

// openMariaDB logs in as a user created for t, so that Kill finds its
// connections in the process list.
func openMariaDB(t testing.TB, via string) *Private {
	admin := sized(testenv.MySQL(t))
	cfg := mysqlConfig(t)
	user := "f" + testenv.Prefix() // hex: safe to splice
	for _, q := range []string{
		"CREATE USER IF NOT EXISTS '" + user + "'@'%'",
		"GRANT ALL PRIVILEGES ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'",
	} {
		_, err := admin.Exec(q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() { _, _ = admin.Exec("DROP USER IF EXISTS '" + user + "'@'%'") })
	cfg.User, cfg.Passwd, cfg.Timeout = user, "", 2*time.Second
	if via != "" {
		cfg.Addr = via
	}
	cfg.Logger = mysql.Logger(log.New(io.Discard, "", 0)) // the kills would flood the log
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	t.Cleanup(func() { db.Close() })
	return &Private{DB: sized(db), Admin: admin, Kill: func(ctx context.Context) (int, error) {
		var ids []int64
		if err := admin.SelectContext(ctx, &ids, "SELECT id FROM information_schema.processlist WHERE user = ?", user); err != nil {
			return 0, err
		}
		n := 0
		for _, id := range ids {
			_, err := admin.ExecContext(ctx, "KILL CONNECTION "+strconv.FormatInt(id, 10))
			var me *mysql.MySQLError
			switch {
			case errors.As(err, &me) && me.Number == 1094: // gone already
			case err != nil:
				return n, err
			default:
				n++
			}
		}
		return n, nil
	}}
}

func pgConfig(t testing.TB) *pgx.ConnConfig {
	cfg, err := pgx.ParseConfig(testenv.Get(testenv.EnvPostgres, testenv.DefaultPostgres))
	require.NoError(t, err)
	return cfg
}

func pgAddr(t testing.TB) string {
	cfg := pgConfig(t)
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
}

// openPostgres names its connections with an application_name of t's own,
// so that Kill finds them in pg_stat_activity.
func openPostgres(t testing.TB, via string) *Private {
	admin := sized(testenv.Postgres(t))
	cfg := pgConfig(t)
	app := "fault_" + testenv.Prefix()
	cfg.RuntimeParams["application_name"] = app
	cfg.ConnectTimeout = 2 * time.Second
	cfg.Fallbacks = nil
	if via != "" {
		host, port, err := net.SplitHostPort(via)
		require.NoError(t, err)
		p, err := strconv.Atoi(port)
		require.NoError(t, err)
		cfg.Host, cfg.Port = host, uint16(p)
	}
	name := stdlib.RegisterConnConfig(cfg)
	t.Cleanup(func() { stdlib.UnregisterConnConfig(name) })
	db, err := sqlx.Open("pgx", name)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return &Private{DB: sized(db), Admin: admin, Kill: func(ctx context.Context) (int, error) {
		var n int
		err := admin.GetContext(ctx, &n,
			"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", app)
		return n, err
	}}
}

// KillFor calls p.Kill every pause for d: the fault of a sale whose
// backends keep dying. It reports how many connections it killed.
func KillFor(t testing.TB, p *Private, d, pause time.Duration) (killed *atomic.Int64, fault func()) {
	killed = new(atomic.Int64)
	return killed, func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		for ctx.Err() == nil {
			n, err := p.Kill(ctx)
			if err != nil && ctx.Err() == nil {
				t.Errorf("kill: %v", err)
				return
			}
			killed.Add(int64(n))
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}

// Alternate is a StockManager that sends each Reduce and Return to the next
// of its managers in turn, so that one sale runs them all on the same rows.
// Init and Get go to the first.
type Alternate struct {
	Managers []inventory.StockManager
	n        atomic.Uint64
}

var _ inventory.StockManager = (*Alternate)(nil)

func (a *Alternate) next() inventory.StockManager {
	return a.Managers[a.n.Add(1)%uint64(len(a.Managers))]
}

// Init implements [inventory.StockManager].
func (a *Alternate) Init(ctx context.Context, sku string, qty int64) error {
	return a.Managers[0].Init(ctx, sku, qty)
}

// Get implements [inventory.StockManager].
func (a *Alternate) Get(ctx context.Context, sku string) (int64, error) {
	return a.Managers[0].Get(ctx, sku)
}

// Reduce implements [inventory.StockManager].
func (a *Alternate) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return a.next().Reduce(ctx, sku, qty, opts...)
}

// Return implements [inventory.StockManager].
func (a *Alternate) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	return a.next().Return(ctx, sku, qty, opts...)
}

// Checked wraps a StockManager whose SKUs have stock to spare during a
// network fault, and fails t when an error of Reduce or Return claims to
// know the stock (ErrInsufficientStock, ErrNotFound) or does not come from
// package pkg.
type Checked struct {
	inventory.StockManager
	T   testing.TB
	Pkg string // the error prefix, such as "optimistic"
}

// Reduce implements [inventory.StockManager].
func (c Checked) Reduce(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := c.StockManager.Reduce(ctx, sku, qty, opts...)
	return rem, c.check(err)
}

// Return implements [inventory.StockManager].
func (c Checked) Return(ctx context.Context, sku string, qty int64, opts ...inventory.Option) (int64, error) {
	rem, err := c.StockManager.Return(ctx, sku, qty, opts...)
	return rem, c.check(err)
}

func (c Checked) check(err error) error {
	switch {
	case err == nil, errors.Is(err, inventory.ErrDuplicate):
	case errors.Is(err, inventory.ErrInsufficientStock), errors.Is(err, inventory.ErrNotFound):
		c.T.Errorf("a fault was reported as a fact about the stock: %v", err)
	case !strings.HasPrefix(err.Error(), c.Pkg+": "):
		c.T.Errorf("error not wrapped by %s: %v", c.Pkg, err)
	}
	return err
}

// NetworkFault is a fault of the network between a pool and its server.
type NetworkFault struct {
	Name  string
	Fault func(*netfault.Proxy)
	// For is how long the fault lasts: past the call timeout where calls
	// hang, briefly where they fail at once.
	For time.Duration
}

// NetworkFaults are the faults every SQL strategy's sale runs through: the
// server's answers late past the call timeout, lost, reset, cut short.
var NetworkFaults = []NetworkFault{
	{"latency past the timeout", func(p *netfault.Proxy) { p.Latency(CallTimeout + 500*time.Millisecond) }, CallTimeout + 250*time.Millisecond},
	{"blackhole", (*netfault.Proxy).Blackhole, CallTimeout + 250*time.Millisecond},
	{"connection reset", func(p *netfault.Proxy) { p.ResetPeer(5 * time.Millisecond) }, 250 * time.Millisecond},
	{"cut mid-reply", func(p *netfault.Proxy) { p.CutAfterBytes(3) }, 250 * time.Millisecond},
}

// CallTimeout bounds each call of a sale under a network fault. It must
// leave time to open a connection after the fault: on this loaded 2-core
// machine a PostgreSQL connection, a process forked per connection, can
// take a few hundred milliseconds under the race detector.
const CallTimeout = time.Second

// LateCommit shows, on PostgreSQL, what a keyed call whose outcome is
// unknown comes to: a trigger deferred to COMMIT holds every commit on the
// ledger until the test lets it through, as a COMMIT waiting for a
// synchronous replica does. Once every manager's keyed Reduce is seen
// waiting in its COMMIT (pg_locks), the calls are cancelled, so each fails
// with its context although the server then commits it. The retry with the
// same key must report ErrDuplicate with the remaining stock of the first
// call, and the stock must have moved once.
//
// The managers reach the server through shield; db, the shared login,
// straight. Nothing here depends on how fast the machine is: the calls are
// cancelled only after the server shows them inside their COMMIT, and
// the cancel requests that pgx sends as it closes their connections
// (asynchronously, over new connections) are dropped by the shield: one
// that landed once the COMMIT went on would cancel it, and the call would
// not have taken effect.
func LateCommit(t *testing.T, db *sqlx.DB, schema sqlstore.Schema, shield *CancelShield, managers ...inventory.StockManager) {
	t.Helper()
	ctx, stop := context.WithTimeout(context.Background(), 5*time.Minute) // a bound for a broken run only
	defer stop()
	fn := "slow_" + testenv.Prefix()
	// The trigger waits for a shared advisory lock, the gate, that the
	// test holds exclusively, whatever lock_timeout or statement_timeout
	// the manager set.
	key := strconv.Itoa(int(rand.Int32()))
	_, err := db.ExecContext(ctx, `CREATE FUNCTION "`+fn+`"() RETURNS trigger LANGUAGE plpgsql
		SET lock_timeout = 0 SET statement_timeout = 0 AS $$
		BEGIN
			PERFORM pg_advisory_xact_lock_shared(`+lateCommitGate+`, `+key+`);
			RETURN NULL;
		END $$`)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec(`DROP FUNCTION IF EXISTS "` + fn + `"() CASCADE`) })
	_, err = db.ExecContext(ctx, `CREATE CONSTRAINT TRIGGER "`+fn+`" AFTER INSERT OR UPDATE ON "`+schema.Ledger+
		`" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "`+fn+`"()`)
	require.NoError(t, err)

	skus := make([]string, len(managers))
	for i, m := range managers {
		skus[i] = testenv.Prefix()
		require.NoError(t, m.Init(ctx, skus[i], 10))
	}

	// The gate: held on a connection of its own until the calls are
	// cancelled. Cleanups run last-in first-out, so a failed test opens it
	// (and cancels the calls) before the trigger is dropped.
	gate, err := db.Connx(ctx)
	require.NoError(t, err)
	_, err = gate.ExecContext(ctx, "SELECT pg_advisory_lock("+lateCommitGate+", "+key+")")
	require.NoError(t, err)
	var gateOnce sync.Once
	open := func() {
		gateOnce.Do(func() {
			_, err := gate.ExecContext(context.Background(), "SELECT pg_advisory_unlock_all()")
			if err != nil {
				t.Errorf("open the gate: %v", err)
			}
			gate.Close()
		})
	}
	t.Cleanup(open)

	errs := make([]error, len(managers))
	cancels := make([]context.CancelFunc, len(managers))
	returned := make(chan int, len(managers))
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	for i, m := range managers {
		cctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		t.Cleanup(cancel)
		wg.Go(func() {
			_, errs[i] = m.Reduce(cctx, skus[i], 1, inventory.WithKey("k"))
			returned <- i
		})
	}
	// Wait until every call waits in its COMMIT, at the gate.
	for waiting := 0; waiting != len(managers); {
		require.NoError(t, db.GetContext(ctx, &waiting, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND classid = `+lateCommitGate+` AND objid = `+key+`::int::oid AND objsubid = 2`))
		require.LessOrEqual(t, waiting, len(managers), "commits waiting at the gate")
		select {
		case i := <-returned:
			t.Fatalf("manager %d: the call returned before it reached its COMMIT: %v", i, errs[i])
		case <-ctx.Done():
			t.Fatalf("%d of %d calls reached their COMMIT: %v", waiting, len(managers), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	shield.Refuse(true)
	for _, cancel := range cancels {
		cancel()
	}
	wg.Wait()
	for i, err := range errs {
		require.ErrorIs(t, err, context.Canceled, "manager %d: the call must end with its context, its COMMIT unanswered", i)
	}
	// The commits go through now, the clients gone; DROP TRIGGER waits for
	// them to end. A cancel request sent later finds no statement to
	// cancel.
	open()
	_, err = db.ExecContext(ctx, `DROP TRIGGER "`+fn+`" ON "`+schema.Ledger+`"`)
	require.NoError(t, err)
	shield.Refuse(false)
	for i, m := range managers {
		rem, err := m.Reduce(ctx, skus[i], 1, inventory.WithKey("k"))
		require.ErrorIs(t, err, inventory.ErrDuplicate, "manager %d: the failed call had taken effect", i)
		require.EqualValues(t, 9, rem, "manager %d", i)
		n, err := m.Get(ctx, skus[i])
		require.NoError(t, err)
		require.EqualValues(t, 9, n, "manager %d: the stock moved once", i)
	}
}

// lateCommitGate is the first half of the advisory lock keys of the gates
// of [LateCommit]; the second is random per test.
const lateCommitGate = "7447"

func sized(db *sqlx.DB) *sqlx.DB {
	db.SetMaxOpenConns(sqltest.Conns)
	db.SetMaxIdleConns(sqltest.Conns)
	return db
}
