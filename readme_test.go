package inventory_test

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snippetDir holds every Go block of README.md that is a whole file, as a
// file that `go vet ./...` compiles and vets (a program, or a test file).
const snippetDir = "examples/readme"

// Every ```go block of README.md is either a whole file (it begins with
// "package") identical, but for indentation, to a file under snippetDir,
// or a declaration identical, but for comments and layout, to one in
// stock.go. So each block compiles and vets as written, and a README that
// drifts from the compiled code fails here. To change a snippet, edit the
// file and paste it into README.md.
func TestREADMESnippets(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	files, decls := snippetSources(t)
	require.NotEmpty(t, goBlocks(readme))
	for _, err := range checkSnippets(readme, files, decls) {
		t.Error(err)
	}
}

// The check fails on a README that drifted, in every way it can drift.
func TestREADMESnippetsCatchDrift(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	files, decls := snippetSources(t)
	for name, drift := range map[string][2]string{
		"a changed call":         {"luascript.New(client)", "luascript.New(client, nil)"},
		"a dropped import":       {"\t_ \"github.com/jackc/pgx/v5/stdlib\"", ""},
		"an unchecked error":     {"if err := stock.Init(ctx, \"sneaker-42\", 10); err != nil {\n\t\tlog.Fatal(err)\n\t}\n}", "_ = stock.Init(ctx, \"sneaker-42\", 10)\n}"},
		"a changed contract":     {"Get(ctx context.Context, sku string) (int64, error)", "Get(ctx context.Context, sku string) int64"},
		"a fragment, not a file": {"package main\n\nimport (\n\t\"context\"", "import (\n\t\"context\""},
	} {
		if !strings.Contains(string(readme), drift[0]) {
			t.Fatalf("%s: README.md no longer has %q: update the drift", name, drift[0])
		}
		drifted := strings.Replace(string(readme), drift[0], drift[1], 1)
		assert.NotEmpty(t, checkSnippets([]byte(drifted), files, decls), name)
	}
}

var goBlock = regexp.MustCompile("(?ms)^```go\n(.*?)^```")

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(md []byte) []string {
	var blocks []string
	for _, m := range goBlock.FindAllSubmatch(md, -1) {
		blocks = append(blocks, string(m[1]))
	}
	return blocks
}

// checkSnippets returns one error per block of readme that matches neither
// a file (by content) nor a declaration of stock.go.
func checkSnippets(readme []byte, files map[string]string, decls map[string]bool) []error {
	var errs []error
	for i, b := range goBlocks(readme) {
		first, _, _ := strings.Cut(strings.TrimSpace(b), "\n")
		if strings.HasPrefix(b, "package ") {
			if !matchesFile(b, files) {
				errs = append(errs, fmt.Errorf("README.md Go block %d (%q) is not, as written, a file under %s: copy it from there", i+1, first, snippetDir))
			}
			continue
		}
		d, err := declarations(b, false)
		if err != nil || len(d) == 0 {
			errs = append(errs, fmt.Errorf("README.md Go block %d (%q) is neither a whole file nor declarations: %v", i+1, first, err))
			continue
		}
		for _, s := range d {
			if !decls[s] {
				errs = append(errs, fmt.Errorf("README.md Go block %d (%q) declares what stock.go does not:\n%s", i+1, first, s))
			}
		}
	}
	return errs
}

func matchesFile(block string, files map[string]string) bool {
	b := normalize(block)
	for _, f := range files {
		if normalize(f) == b {
			return true
		}
	}
	return false
}

// normalize makes every leading tab four spaces and drops trailing space,
// the only liberties Markdown takes with a gofmt'ed file.
func normalize(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		rest := strings.TrimLeft(l, "\t")
		lines[i] = strings.TrimRight(strings.Repeat("    ", len(l)-len(rest))+rest, " \t")
	}
	return strings.Join(lines, "\n")
}

// declarations returns the top-level declarations of src, formatted
// without comments; a src that is not a whole file is taken as
// declarations of package inventory.
func declarations(src string, whole bool) ([]string, error) {
	if !whole {
		src = "package inventory\n\n" + src
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, 0)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range f.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			continue
		}
		var buf bytes.Buffer
		if err := format.Node(&buf, fset, d); err != nil {
			return nil, err
		}
		// Blank lines are where stock.go's comments were: layout, not code.
		out = append(out, regexp.MustCompile(`\n\s*\n`).ReplaceAllString(buf.String(), "\n"))
	}
	return out, nil
}

// snippetSources reads the files under snippetDir and the declarations of
// stock.go.
func snippetSources(t *testing.T) (files map[string]string, decls map[string]bool) {
	files = map[string]string{}
	err := filepath.WalkDir(snippetDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".go" {
			return err
		}
		b, err := os.ReadFile(path)
		files[path] = string(b)
		return err
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	src, err := os.ReadFile("stock.go")
	require.NoError(t, err)
	d, err := declarations(string(src), true)
	require.NoError(t, err)
	decls = map[string]bool{}
	for _, s := range d {
		decls[s] = true
	}
	return files, decls
}
