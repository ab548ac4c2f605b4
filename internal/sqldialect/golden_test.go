package sqldialect_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/internal/sqldialect"
)

var update = flag.Bool("update", false, "rewrite testdata/statements.golden")

// TestGolden renders every engine's statements for the default schema, with
// rowlock's default lock timeout, and compares them with
// testdata/statements.golden (go test -run TestGolden -update rewrites it).
func TestGolden(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Every statement of every engine for the default schema, LockWait 5s\n" +
		"# (rowlock's default). Batch statements are shown with two rows.\n" +
		"# Regenerate: go test ./internal/sqldialect -run TestGolden -update\n")
	for _, driver := range []string{"mysql", "postgres", "sqlite"} {
		eng, err := sqldialect.EngineOf(driver)
		require.NoError(t, err)
		for _, s := range sqldialect.Build(eng, sqldialect.Schema{}.WithDefaults(), 5*time.Second, false).List() {
			fmt.Fprintf(&b, "\n-- %s %s --\n%s\n", eng, s.Name, s.SQL)
		}
	}
	path := filepath.Join("testdata", "statements.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, string(want), b.String(), "run with -update and review the diff")
}
