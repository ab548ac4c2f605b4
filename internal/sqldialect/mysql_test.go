package sqldialect_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/sqldialect"
	"github.com/stockkit/inventory/internal/sqldialect/sqltest"
	"github.com/stockkit/inventory/internal/sqlengine"
	"github.com/stockkit/inventory/internal/testenv"
)

// TestMySQLErrors makes MariaDB return the errors the package tells apart
// and checks that the number is read without the driver's type: lock wait
// timeout 1205 and deadlock 1213 are contention, duplicate key 1062 is not.
// (MySQL 8's NOWAIT error, 3572, has no MariaDB form.)
func TestMySQLErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := sqltest.Open(t, "mariadb")
	schema := sqldialect.Schema(sqltest.Schema(t, db))
	tb := sqltest.Tables(t, db, sqlengine.Config{Schema: schema, LockWait: time.Second})
	a, b := testenv.Prefix(), testenv.Prefix()
	require.NoError(t, tb.Init(ctx, a, 1))
	require.NoError(t, tb.Init(ctx, b, 1))
	check := func(t *testing.T, err error, number uint16, contention bool) {
		t.Helper()
		var me *mysql.MySQLError
		require.ErrorAs(t, err, &me, "%v", err)
		require.Equal(t, number, me.Number, "%v", err)
		n, ok := sqldialect.MySQLNumber(err)
		require.True(t, ok, "%v", err)
		require.Equal(t, number, n)
		require.Equal(t, contention, errors.Is(err, inventory.ErrContention), "%v", err)
	}

	t.Run("duplicate key 1062", func(t *testing.T) {
		_, err := db.ExecContext(ctx, fmt.Sprintf("INSERT INTO `%s` (`%s`, `%s`) VALUES (?, 1)", schema.Table, "sku", "stock"), a)
		check(t, tb.Err(ctx, "insert", err), 1062, false)
	})
	t.Run("lock wait timeout 1205", func(t *testing.T) {
		holder, err := db.BeginTxx(ctx, nil)
		require.NoError(t, err)
		defer holder.Rollback()
		_, err = tb.LockHolds(ctx, holder, a)
		require.NoError(t, err)
		err = tb.Tx(ctx, func(tx *sqlx.Tx) error { _, err := tb.LockHolds(ctx, tx, a); return err })
		check(t, err, 1205, true)
	})
	t.Run("deadlock 1213", func(t *testing.T) {
		errs := sqltest.Deadlock(t, ctx, db, tb, a, b)
		err := errors.Join(errs[0], errs[1])
		require.Error(t, err, "the server broke the deadlock")
		check(t, err, 1213, true)
	})
}

// MySQLError is a look-alike of the driver's: its name and Number field,
// but not its package.
type MySQLError struct{ Number uint16 }

func (*MySQLError) Error() string { return "not the driver's" }

func TestMySQLNumber(t *testing.T) {
	me := &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}
	for _, c := range []struct {
		err  error
		want uint16
		ok   bool
	}{
		{me, 1213, true},
		{fmt.Errorf("x: %w", me), 1213, true},
		{fmt.Errorf("x: %w: %w", inventory.ErrContention, me), 1213, true},
		{errors.Join(errors.New("a"), fmt.Errorf("b: %w", me)), 1213, true},
		{(*mysql.MySQLError)(nil), 0, false},
		{&MySQLError{Number: 1213}, 0, false},
		{errors.New("Error 1213 (40001): Deadlock found"), 0, false},
		{mysql.ErrInvalidConn, 0, false},
	} {
		n, ok := sqldialect.MySQLNumber(c.err)
		require.Equal(t, c.want, n, "%#v", c.err)
		require.Equal(t, c.ok, ok, "%#v", c.err)
	}
}

// TestNoMySQLDriver: a program using the SQL strategies on PostgreSQL or
// SQLite links neither go-sql-driver/mysql nor modernc.org/sqlite.
func TestNoMySQLDriver(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH:", err)
	}
	pkgs := []string{"optimistic", "rowlock", "sqlstore", "internal/sqldialect"}
	args := []string{"list", "-deps"}
	for _, p := range pkgs {
		args = append(args, "github.com/stockkit/inventory/"+p)
	}
	out, err := exec.Command(gocmd, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, dep := range strings.Fields(string(out)) {
		require.False(t, strings.HasPrefix(dep, "github.com/go-sql-driver/") || strings.HasPrefix(dep, "modernc.org/"),
			"%v import %s", pkgs, dep)
	}
}
