package sqldialect

import (
	"reflect"
)

// mysqlSQL is the SQL for MariaDB and MySQL.
//
// MySQL has no UPDATE ... RETURNING: move hands the new stock back through
// LAST_INSERT_ID(expr), in the same statement's OK packet. The lock wait is
// a MariaDB-only executable comment: MySQL reads a plain comment and keeps
// its innodb_lock_wait_timeout.
//
// The clock of the holds is UTC_TIMESTAMP(6) as Unix microseconds: it is
// fixed for the length of a statement and does not depend on the session's
// time zone.
var mysqlSQL = Statements{
	quote: "`",
	now:   "TIMESTAMPDIFF(MICROSECOND, '1970-01-01', UTC_TIMESTAMP(6))",

	Init: `INSERT INTO {{.Table}} ({{.SKU}}, {{.Stock}}, {{.Version}}) VALUES (?, ?, 1)
		ON DUPLICATE KEY UPDATE {{.Stock}} = VALUES({{.Stock}}), {{.Version}} = {{.Version}} + 1`,
	Move: `UPDATE {{.Table}} SET {{.Stock}} = LAST_INSERT_ID({{.Stock}} + ?), {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?
			AND NOT EXISTS (SELECT 1 FROM {{.Holds}} h
				WHERE h.sku = {{.Table}}.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})`,

	Shift: `UPDATE {{.Table}} SET {{.Stock}} = LAST_INSERT_ID({{.Stock}} + ?), {{.Version}} = {{.Version}} + 1
		WHERE {{.SKU}} = ? AND {{.Stock}} BETWEEN ? AND ?`,

	Prune: `DELETE FROM {{.Ledger}} WHERE expires_at <= ? LIMIT 1000`,
	Insert: `INSERT IGNORE INTO {{.Ledger}} (sku, dir, idem_key, remaining, expires_at)
		VALUES {{rows "(?, ?, ?, ?, ?)"}}`,

	LockHolds: `SELECT t.{{.Stock}}, t.{{.Version}}, EXISTS (SELECT 1 FROM {{.Holds}} h
			WHERE h.sku = t.{{.SKU}} AND h.state = 'held' AND h.expires_at <= {{.Now}})
		FROM {{.Table}} t WHERE t.{{.SKU}} = ? FOR UPDATE` +
		`{{with .WaitSeconds}} /*M!100300 WAIT {{.}} */{{end}}`,
	Reserve: `INSERT IGNORE INTO {{.Holds}} (hold_id, sku, qty, state, expires_at)
		VALUES {{rows (printf "(?, ?, ?, 'held', %s + ?)" .Now)}}`,
	PruneHolds: `DELETE FROM {{.Holds}} WHERE ended_at <= {{.Now}} - ? LIMIT 1000`,

	Create: []string{
		`CREATE TABLE IF NOT EXISTS {{.Table}} (
			{{.SKU}} VARBINARY(255) NOT NULL PRIMARY KEY,
			{{.Stock}} BIGINT NOT NULL CHECK ({{.Stock}} >= 0),
			{{.Version}} BIGINT NOT NULL DEFAULT 0
		) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS {{.Ledger}} (
			sku VARBINARY(255) NOT NULL,
			dir VARBINARY(8) NOT NULL,
			idem_key VARBINARY(255) NOT NULL,
			remaining BIGINT NOT NULL,
			expires_at BIGINT NOT NULL,
			PRIMARY KEY (sku, dir, idem_key),
			KEY {{.Index}} (expires_at)
		) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS {{.Holds}} (
			hold_id VARBINARY(257) NOT NULL,
			sku VARBINARY(255) NOT NULL,
			qty BIGINT NOT NULL CHECK (qty > 0),
			state VARBINARY(9) NOT NULL,
			expires_at BIGINT NOT NULL,
			ended_at BIGINT NULL,
			PRIMARY KEY (hold_id, sku),
			KEY {{.BySKU}} (sku, state, expires_at),
			KEY {{.Due}} (state, expires_at),
			KEY {{.Ended}} (ended_at)
		) ENGINE=InnoDB`,
		`CREATE TABLE IF NOT EXISTS {{.Orders}} (
			id VARBINARY(257) NOT NULL PRIMARY KEY,
			order_lines MEDIUMBLOB NOT NULL,
			state VARBINARY(9) NOT NULL,
			expires_at BIGINT NOT NULL,
			abandon_at BIGINT NOT NULL,
			due_at BIGINT NOT NULL,
			complete TINYINT NOT NULL,
			done TINYINT NOT NULL,
			kept_until BIGINT NULL,
			KEY {{.OrdersDue}} (done, due_at)
		) ENGINE=InnoDB`,
	},
}

// The MySQL error numbers that mean lock contention.
const (
	mysqlLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT, and MariaDB's WAIT n and NOWAIT
	mysqlDeadlock        = 1213 // ER_LOCK_DEADLOCK
	mysqlNoWait          = 3572 // ER_LOCK_NOWAIT (MySQL 8)
)

func mysqlContention(err error) bool {
	n, ok := mysqlNumber(err)
	return ok && (n == mysqlLockWaitTimeout || n == mysqlDeadlock || n == mysqlNoWait)
}

// mysqlErrorPkg and mysqlErrorName name go-sql-driver/mysql's server error, *mysql.MySQLError.
const mysqlErrorPkg, mysqlErrorName = "github.com/go-sql-driver/mysql", "MySQLError"

// mysqlNumber returns the error number of the first *mysql.MySQLError in
// err's tree, as errors.As would find it. It recognises the type by
// reflection, its package path, name and uint16 Number field, so that a
// program that does not use MySQL does not link the driver.
func mysqlNumber(err error) (uint16, bool) {
	for err != nil {
		if v := reflect.ValueOf(err); v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct {
			typ := v.Type().Elem()
			if typ.PkgPath() == mysqlErrorPkg && typ.Name() == mysqlErrorName && !v.IsNil() {
				if f := v.Elem().FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
					return uint16(f.Uint()), true
				}
			}
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if n, ok := mysqlNumber(e); ok {
					return n, true
				}
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}

// mysqlTooManyStmts is ER_MAX_PREPARED_STMT_COUNT_REACHED: the server's
// max_prepared_stmt_count is used up (by this process or others).
const mysqlTooManyStmts = 1461

// TooManyStatements reports whether err says the server (MySQL) has no
// room for another prepared statement: the call runs again as text.
func TooManyStatements(err error) bool {
	n, ok := mysqlNumber(err)
	return ok && n == mysqlTooManyStmts
}
