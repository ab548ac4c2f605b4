// Package sqldialect is what differs between MariaDB/MySQL, PostgreSQL and
// SQLite for the SQL layer that sqlstore, optimistic and rowlock share:
// placeholders, identifier quoting, upserts, how an UPDATE reports the new
// value, which errors mean "lock contention" ([Contention]), and the
// statements over the stock table, the idempotency ledger, the holds table,
// the orders table and the movement ledger, rendered once from a validated
// [Schema] by [Build]. Package sqlengine runs them (its Tables: the error
// rules, transactions, savepoints, prepared statements, key pruning) and
// the order calls over them; sqlstore keeps the statements of its holds
// (lockmgr.HoldStore) itself, built with [Statements.Render].
//
// Hold times are Unix microseconds on the database's clock, an expression
// each engine's file defines once ({{.Now}} in the statements); idempotency
// keys keep their expiry in Unix milliseconds of the writing process.
//
// The statements every engine runs as they are are written once
// (standard.go); each engine's file (mysql.go, postgres.go, sqlite.go)
// writes out the rest, what differs, as text/template text;
// testdata/statements.golden shows them all rendered for the default
// schema. Every statement takes its
// values as bind parameters; the only text substituted into SQL is
// identifiers that passed [Schema.Validate] and are then quoted, and the
// lock wait as an integer.
//
// The package does not import go-sql-driver/mysql, so that a program on
// PostgreSQL or SQLite does not link it: MySQL errors are recognised by
// reflection (see mysqlNumber).
package sqldialect

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/stockkit/inventory"
)

// Engine is a SQL engine family.
type Engine int

// The engines, chosen from the sqlx driver name.
const (
	MySQL    Engine = iota + 1 // "mysql": MariaDB and MySQL
	Postgres                   // "pgx", "postgres"
	SQLite                     // "sqlite" (modernc.org/sqlite), "sqlite3"
)

func (e Engine) String() string {
	return [...]string{"unknown", "mysql", "postgres", "sqlite"}[e]
}

// EngineOf maps a database/sql driver name to its engine.
func EngineOf(driverName string) (Engine, error) {
	switch driverName {
	case "mysql":
		return MySQL, nil
	case "pgx", "postgres":
		return Postgres, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return 0, fmt.Errorf("%w: unsupported sql driver %q (want mysql, pgx, postgres, sqlite or sqlite3)",
		inventory.ErrInvalidArgument, driverName)
}

// Schema names the stock table, its columns, the idempotency ledger and
// the holds table. Zero fields take the defaults below.
type Schema struct {
	Table, SKU, Stock, Version, Ledger, Holds, Orders string
}

// Default names.
const (
	DefaultTable   = "stock"
	DefaultSKU     = "sku"
	DefaultStock   = "stock"
	DefaultVersion = "version"
	DefaultLedger  = "stock_ledger"

	// HoldsSuffix names the default holds table: the stock table's name
	// (its first 57 bytes) and this suffix, "stock_holds" for the default
	// table.
	HoldsSuffix = "_holds"

	// OrdersSuffix names the default orders table (the lock strategies'
	// order records, see sqlstore) in the same way: "stock_orders".
	OrdersSuffix = "_orders"
)

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// WithDefaults fills the zero fields of s.
func (s Schema) WithDefaults() Schema {
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&s.Table, DefaultTable)
	def(&s.SKU, DefaultSKU)
	def(&s.Stock, DefaultStock)
	def(&s.Version, DefaultVersion)
	def(&s.Ledger, DefaultLedger)
	def(&s.Holds, s.Table[:min(len(s.Table), 63-len(HoldsSuffix))]+HoldsSuffix)
	def(&s.Orders, s.Table[:min(len(s.Table), 63-len(OrdersSuffix))]+OrdersSuffix)
	return s
}

// Validate refuses any name that is not a plain identifier: a letter or
// underscore, then letters, digits and underscores, at most 63 bytes.
func (s Schema) Validate() error {
	for _, f := range []struct{ what, v string }{
		{"table", s.Table}, {"sku column", s.SKU}, {"stock column", s.Stock},
		{"version column", s.Version}, {"ledger table", s.Ledger}, {"holds table", s.Holds},
		{"orders table", s.Orders},
	} {
		if !identRE.MatchString(f.v) {
			return fmt.Errorf("%w: %s name %q is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*, at most 63 bytes)",
				inventory.ErrInvalidArgument, f.what, f.v)
		}
	}
	if names := []string{s.Table, s.Ledger, s.Holds, s.Orders}; len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
		return fmt.Errorf("%w: table %q, ledger %q, holds %q and orders %q must differ",
			inventory.ErrInvalidArgument, s.Table, s.Ledger, s.Holds, s.Orders)
	}
	if s.SKU == s.Stock || s.SKU == s.Version || s.Stock == s.Version {
		return fmt.Errorf("%w: sku, stock and version columns must differ", inventory.ErrInvalidArgument)
	}
	return nil
}

// Statements holds one engine's SQL (standard.go with mysql.go, postgres.go
// or sqlite.go) as text/template text over [names]; [Build] renders it into
// the same struct, which the engine (package sqlengine) runs. Keys and Insert hold one
// {{rows "..."}}, the list of n rows of a batch, which [Statements.Expand]
// writes out per call; Record is Insert with one row.
//
// The holds statements follow the same rules; ReadHolds, Release and
// Reserve are batch statements.
type Statements struct {
	quote string // identifier quote
	now   string // the database's clock, in Unix microseconds (see [names])

	Get, Read, LockTimeout, Init, Set, Move string
	Shift                                   string // Move without the holds guard
	Seen, Peek, Record, Renew, Prune        string
	Keys, Insert                            string

	LockHolds, Expired, Lines, LockLines, Confirm, End, Forget string
	Held, Due, PruneHolds                                      string
	ReadHolds, Release, Reserve                                string
	ReadHolds1                                                 string // ReadHolds with one row

	Create []string

	// Moves is the movement ledger's statements (moves.go), when Build
	// was asked for them; nil otherwise.
	Moves *MovesSQL

	eng Engine // what Render and Expand write for
	n   names  // what the statements used
}

// names is what a statement's template may use: the schema's identifiers,
// validated and quoted, the lock wait in the units the engines take, and
// the engine's clock.
type names struct {
	Table, SKU, Stock, Version, Ledger string
	Index                              string // the ledger's expires_at index
	WaitSeconds                        int64  // MariaDB's FOR UPDATE WAIT n: LockWait rounded up; 0 for none
	LockTimeoutMillis                  int64  // PostgreSQL's lock_timeout; 0 for none

	Holds             string // the holds table
	BySKU, Due, Ended string // its indexes
	Orders, OrdersDue string // the orders table and its index
	Now               string // the database's clock as Unix microseconds: an expression
	Text, Int, Small  string // column types of PostgreSQL's and SQLite's tables: bytes, 64 and 16 bits
	MaxRelease        int    // expired holds one call of a SKU releases at most
}

// rowsMark brackets the row of a batch list in a rendered statement.
const rowsMark = "\x00"

// MaxRelease is how many expired lines of one SKU a call releases at most;
// the rest wait for the next call or Sweep.
const MaxRelease = 1000

// Build renders eng's statements over schema s, validated and defaulted
// (see [Schema.Validate]), with the lock wait lockWait (see [names]) and,
// when moves is set, the movement ledger's. It does no I/O.
func Build(eng Engine, s Schema, lockWait time.Duration, moves bool) *Statements {
	q, n := build(eng, s, lockWait)
	q.eng, q.n = eng, n
	if moves {
		q.Moves = buildMoves(eng, s, n)
	}
	return &q
}

// build renders eng's statements over schema s, and returns the names they
// used.
func build(eng Engine, s Schema, lockWait time.Duration) (Statements, names) {
	text := withStandard(map[Engine]Statements{MySQL: mysqlSQL, Postgres: postgresSQL, SQLite: sqliteSQL}[eng])
	quote := func(id string) string { return text.quote + id + text.quote }
	n := names{
		Table: quote(s.Table), SKU: quote(s.SKU), Stock: quote(s.Stock), Version: quote(s.Version), Ledger: quote(s.Ledger),
		Index: quote(s.Ledger[:min(len(s.Ledger), 52)] + "_expires_at"), // within 63 bytes
		Holds: quote(s.Holds), Now: text.now, MaxRelease: MaxRelease,
		BySKU:  quote(s.Holds[:min(len(s.Holds), 56)] + "_by_sku"),
		Due:    quote(s.Holds[:min(len(s.Holds), 59)] + "_due"),
		Ended:  quote(s.Holds[:min(len(s.Holds), 57)] + "_ended"),
		Orders: quote(s.Orders), OrdersDue: quote(s.Orders[:min(len(s.Orders), 59)] + "_due"),
	}
	if eng == SQLite {
		n.Text, n.Int, n.Small = "TEXT", "INTEGER", "INTEGER"
	} else {
		n.Text, n.Int, n.Small = `TEXT COLLATE "C"`, "BIGINT", "SMALLINT"
	}
	if lockWait > 0 {
		n.WaitSeconds = int64((lockWait + time.Second - 1) / time.Second)
		n.LockTimeoutMillis = max(1, lockWait.Milliseconds())
	}
	render := func(src string) string { return n.render(src) }
	q := Statements{quote: text.quote, now: text.now, Keys: render(text.Keys), Insert: render(text.Insert),
		ReadHolds: render(text.ReadHolds), Release: render(text.Release), Reserve: render(text.Reserve)}
	for _, f := range []struct{ dst, src *string }{
		{&q.Get, &text.Get}, {&q.Read, &text.Read}, {&q.LockTimeout, &text.LockTimeout},
		{&q.Init, &text.Init}, {&q.Set, &text.Set}, {&q.Move, &text.Move}, {&q.Shift, &text.Shift},
		{&q.Seen, &text.Seen}, {&q.Peek, &text.Peek}, {&q.Renew, &text.Renew}, {&q.Prune, &text.Prune},
		{&q.LockHolds, &text.LockHolds}, {&q.Expired, &text.Expired}, {&q.Lines, &text.Lines},
		{&q.LockLines, &text.LockLines}, {&q.Confirm, &text.Confirm}, {&q.End, &text.End},
		{&q.Forget, &text.Forget}, {&q.Held, &text.Held}, {&q.Due, &text.Due}, {&q.PruneHolds, &text.PruneHolds},
	} {
		*f.dst = bind(eng, render(*f.src))
	}
	q.Record = expand(eng, q.Insert, 1)
	q.ReadHolds1 = expand(eng, q.ReadHolds, 1)
	for _, c := range text.Create {
		q.Create = append(q.Create, render(c))
	}
	return q, n
}

// withStandard fills the statements an engine's file leaves empty from
// standardSQL.
func withStandard(s Statements) Statements {
	v, std := reflect.ValueOf(&s).Elem(), reflect.ValueOf(standardSQL)
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.String && f.CanSet() && f.String() == "" {
			f.SetString(std.Field(i).String())
		}
	}
	return s
}

// Statement is one of [Statements], by name, as the engine gets it.
type Statement struct{ Name, SQL string }

// List returns every statement of q, the batch ones with two rows: what
// the tests run and testdata/statements.golden shows.
func (q *Statements) List() []Statement {
	ss := []Statement{
		{"get", q.Get}, {"read", q.Read}, {"lockTimeout", q.LockTimeout},
		{"init", q.Init}, {"set", q.Set}, {"move", q.Move}, {"shift", q.Shift},
		{"seen", q.Seen}, {"peek", q.Peek}, {"record", q.Record}, {"renew", q.Renew}, {"prune", q.Prune},
		{"keys", expand(q.eng, q.Keys, 2)}, {"insert", expand(q.eng, q.Insert, 2)},
		{"readHolds", expand(q.eng, q.ReadHolds, 2)}, {"lockHolds", q.LockHolds}, {"expired", q.Expired},
		{"release", expand(q.eng, q.Release, 2)}, {"reserve", expand(q.eng, q.Reserve, 2)},
		{"lines", q.Lines}, {"lockLines", q.LockLines}, {"confirm", q.Confirm}, {"end", q.End},
		{"forget", q.Forget}, {"held", q.Held}, {"due", q.Due}, {"pruneHolds", q.PruneHolds},
	}
	for _, c := range q.Create {
		ss = append(ss, Statement{"create", c})
	}
	return slices.DeleteFunc(ss, func(s Statement) bool { return s.SQL == "" }) // lockTimeout, on PostgreSQL alone
}

// render executes src, a statement's template, over n.
func (n names) render(src string) string { return renderOver(src, n) }

// renderOver executes src, a statement's template, over data.
func renderOver(src string, data any) string {
	tmpl := template.Must(template.New("").Funcs(template.FuncMap{
		"rows": func(row string) string { return rowsMark + row + rowsMark },
	}).Parse(src))
	var b strings.Builder
	if err := tmpl.Execute(&b, data); err != nil {
		panic(err) // names has every field the statements use: a bug, which every test hits
	}
	return dedent(b.String())
}

// dedent removes from the second and later lines of a statement the
// indentation they share in the Go source.
func dedent(q string) string {
	lines := strings.Split(q, "\n")
	indent := -1
	for _, l := range lines[1:] {
		if n := len(l) - len(strings.TrimLeft(l, "\t")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i := 1; i < len(lines); i++ {
		lines[i] = lines[i][indent:]
	}
	return strings.Join(lines, "\n")
}

// Render builds a statement of another package's (sqlstore's) over q's
// schema, as q's own are built: src is text/template text over the quoted
// names of the schema ({{.Table}}, {{.SKU}}, {{.Stock}}, {{.Version}},
// {{.Ledger}}, {{.Holds}}, {{.Orders}}) and {{.Now}}, the database's clock
// in Unix microseconds, with ? placeholders (numbered on PostgreSQL).
func (q *Statements) Render(src string) string { return bind(q.eng, q.n.render(src)) }

// Expand writes out batch statement stmt, one of q's, with n rows.
func (q *Statements) Expand(stmt string, n int) string { return expand(q.eng, stmt, n) }

// expand writes out batch statement q, rendered by [build], with n rows.
func expand(eng Engine, q string, n int) string {
	head, rest, _ := strings.Cut(q, rowsMark)
	row, tail, _ := strings.Cut(rest, rowsMark)
	return bind(eng, head+strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")+tail)
}

// bind numbers the ? placeholders of q $1, $2, ... on PostgreSQL.
func bind(eng Engine, q string) string {
	if eng == Postgres {
		return sqlx.Rebind(sqlx.DOLLAR, q)
	}
	return q
}

// Contention reports whether err, from a statement on engine eng, means
// lock contention: a deadlock, a lock wait timeout, a serialization
// failure or a busy database.
func Contention(eng Engine, err error) bool {
	switch eng {
	case MySQL:
		return mysqlContention(err)
	case Postgres:
		return postgresContention(err)
	case SQLite:
		return sqliteContention(err)
	}
	return false
}
