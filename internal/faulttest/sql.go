package faulttest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory/internal/testenv"
)

// SQLServer is a private MariaDB or PostgreSQL server owned by one test,
// with a database "test" that a client reaches over TCP with no password.
// Kill, Start and Restart act on it as on a private Redis: Kill is a
// SIGKILL of the server's whole process group (a crash; the data stays),
// Start brings it back on the same port and data, through the engine's
// crash recovery.
type SQLServer struct {
	*Process
	// Driver is the database/sql driver name: "mysql" or "pgx".
	Driver string
	// DSN reaches the database "test".
	DSN string
}

// Open returns a pool on the server's database "test", closed when t ends.
// It does not wait for the server: the pool reconnects after a restart.
func (s *SQLServer) Open(t testing.TB, maxConns int) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Open(s.Driver, s.DSN)
	if err != nil {
		t.Fatalf("open %s: %v", s.name, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	return db
}

// sqlPing opens a connection with dsn and pings it within a second.
func sqlPing(driver, dsn string) error {
	db, err := sqlx.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// dataDir makes a directory for a server's files, removed when t ends
// (after the server is killed: cleanups run last-in first-out).
func dataDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// setup runs one command of a server's installation, with a bound.
func setup(t testing.TB, what string, argv ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
}

// StartMariaDB installs a fresh MariaDB data directory (mariadb-install-db)
// and starts a private mariadbd on a free loopback port with it, grant
// tables skipped (root, or anyone, connects without a password), then
// creates the database "test". It is killed, and its files removed, when t
// ends. A missing binary skips t, or fails it when CI=true.
func StartMariaDB(t testing.TB) *SQLServer {
	t.Helper()
	install := require(t, "mariadb-install-db")
	bin := require(t, "mariadbd")
	dir := dataDir(t, "faulttest-mariadb-")
	data := filepath.Join(dir, "data")
	setup(t, "mariadb-install-db", install, "--no-defaults", "--datadir="+data, "--user=root",
		"--auth-root-authentication-method=normal", "--skip-test-db")
	port := FreePort(t)
	s := &SQLServer{Driver: "mysql"}
	s.Process = &Process{t: t, name: "mariadb-" + strconv.Itoa(port), addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.argv = []string{bin, "--no-defaults", "--user=root", "--datadir=" + data, "--bind-address=127.0.0.1",
		"--port=" + strconv.Itoa(port), "--socket=" + filepath.Join(dir, "mariadb.sock"),
		"--pid-file=" + filepath.Join(dir, "mariadb.pid"), "--skip-grant-tables", "--skip-log-bin",
		"--innodb-buffer-pool-size=64M", "--max-connections=500"}
	root := "root@tcp(" + s.addr + ")/"
	s.DSN = root + "test"
	s.ready = func() error { return sqlPing("mysql", root) }
	s.start()
	t.Cleanup(s.Kill)
	db, err := sqlx.Open("mysql", root)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS test"); err != nil {
		t.Fatalf("create database test: %v", err)
	}
	return s
}

// postgresBin finds a PostgreSQL server program: on PATH, else in Debian's
// /usr/lib/postgresql/VERSION/bin.
func postgresBin(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name); len(m) > 0 {
		return m[len(m)-1]
	}
	return require(t, name) // skips or fails
}

// StartPostgres initialises a fresh PostgreSQL cluster (initdb, trust
// authentication, fsync off: its durability is not under test) and starts
// a private postgres on a free loopback port with it, its socket in its own
// directory, then creates the database "test". PostgreSQL refuses to run as
// root: when the test runs as root, both run as the user postgres (through
// runuser). It is killed, and its files removed, when t ends. A missing
// binary or user skips t, or fails it when CI=true.
func StartPostgres(t testing.TB) *SQLServer {
	t.Helper()
	initdb, bin := postgresBin(t, "initdb"), postgresBin(t, "postgres")
	dir := dataDir(t, "faulttest-postgres-")
	data := filepath.Join(dir, "data")
	as := func(argv ...string) []string { return argv }
	if os.Geteuid() == 0 {
		runuser := require(t, "runuser")
		u, err := user.Lookup("postgres")
		if err != nil {
			testenv.Missing(t, "user postgres (PostgreSQL does not run as root)", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		as = func(argv ...string) []string { return append([]string{runuser, "-u", "postgres", "--"}, argv...) }
	}
	setup(t, "initdb", as(initdb, "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--no-instructions", "-E", "UTF8")...)
	port := FreePort(t)
	s := &SQLServer{Driver: "pgx"}
	s.Process = &Process{t: t, name: "postgres-" + strconv.Itoa(port), addr: "127.0.0.1:" + strconv.Itoa(port)}
	s.argv = as(bin, "-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "max_connections=200", "-c", "shared_buffers=32MB")
	base := fmt.Sprintf("postgres://postgres@%s/", s.addr)
	s.DSN = base + "test?sslmode=disable"
	s.ready = func() error { return sqlPing("pgx", base+"postgres?sslmode=disable") }
	s.start()
	t.Cleanup(s.Kill)
	db, err := sqlx.Open("pgx", base+"postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("CREATE DATABASE test"); err != nil {
		t.Fatalf("create database test: %v", err)
	}
	return s
}

// DataDir returns the directory a private server keeps its data in (Redis's
// --dir, MariaDB's --datadir, PostgreSQL's -D), or "" when its command line
// names none. Kill the server before changing it.
func (p *Process) DataDir() string {
	for i, a := range p.argv {
		if v, ok := strings.CutPrefix(a, "--datadir="); ok {
			return v
		}
		if (a == "--dir" || a == "-D") && i+1 < len(p.argv) {
			return p.argv[i+1]
		}
	}
	return ""
}
