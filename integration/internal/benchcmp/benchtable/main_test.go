package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory/integration/internal/benchcmp"
)

// The committed runs (integration/bench/results) rendered into a copy of
// docs/benchmarks.md give the committed page: the table there is the one
// make bench and make bench-check wrote, and -doc touches only the block.
func TestRunRewritesTheDocsPage(t *testing.T) {
	const page = "../../../../docs/benchmarks.md"
	const results = "../../../bench/results"
	want, err := os.ReadFile(page)
	require.NoError(t, err)
	doc := filepath.Join(t.TempDir(), "benchmarks.md")
	require.NoError(t, os.WriteFile(doc, want, 0o644))
	check := filepath.Join(results, "check.json")
	if _, err := os.Stat(check); err != nil {
		check = "" // make bench without bench-check
	}
	require.NoError(t, run(filepath.Join(results, "run.json"), check, doc))
	got, err := os.ReadFile(doc)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "docs/benchmarks.md is not what the committed runs render: run make bench-check, or commit the runs that made it")
}

// A file without the markers is an error and stays as it was.
func TestRunNeedsTheMarkers(t *testing.T) {
	doc := filepath.Join(t.TempDir(), "README.md")
	require.NoError(t, os.WriteFile(doc, []byte("# no table here\n"), 0o644))
	err := run("../../../bench/results/run.json", "", doc)
	assert.True(t, errors.Is(err, benchcmp.ErrNoMarkers), "%v", err)
	b, err := os.ReadFile(doc)
	require.NoError(t, err)
	assert.Equal(t, "# no table here\n", string(b))
}
