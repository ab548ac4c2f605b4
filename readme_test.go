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
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/lockmgr"
	"github.com/stockkit/inventory/luascript"
	"github.com/stockkit/inventory/optimistic"
	"github.com/stockkit/inventory/redislock"
	"github.com/stockkit/inventory/redlock"
	"github.com/stockkit/inventory/rowlock"
	"github.com/stockkit/inventory/tiered"
	"github.com/stockkit/inventory/zklock"
)

// snippetDir holds every Go block of README.md that is a whole file, as a
// file that `go vet ./...` compiles and vets (a program, or a test file).
const snippetDir = "examples/readme"

// docFiles returns README.md and the pages under docs/, by path.
func docFiles(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no pages under docs/")
	docs := map[string][]byte{}
	for _, p := range append(paths, "README.md") {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		docs[p] = b
	}
	return docs
}

// allDocs returns README.md and the pages under docs/ as one text.
func allDocs(t *testing.T) []byte {
	t.Helper()
	docs := docFiles(t)
	var all []byte
	for _, p := range sortedKeys(docs) {
		all = append(append(all, docs[p]...), '\n')
	}
	return all
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Every ```go block of README.md and of the pages under docs/ is either a
// whole file (it begins with "package") identical, but for indentation, to
// a file under snippetDir, or a declaration identical, but for comments and
// layout, to one in stock.go. So each block compiles and vets as written,
// and a page that drifts from the compiled code fails here. To change a
// snippet, edit the file and paste it into the page.
func TestREADMESnippets(t *testing.T) {
	files, decls := snippetSources(t)
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	require.NotEmpty(t, goBlocks(readme), "README.md has no quick start")
	for _, p := range sortedKeys(docFiles(t)) {
		doc, err := os.ReadFile(p)
		require.NoError(t, err)
		for _, err := range checkSnippets(doc, files, decls) {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// The check fails on docs that drifted, in every way they can drift.
func TestREADMESnippetsCatchDrift(t *testing.T) {
	readme := allDocs(t)
	files, decls := snippetSources(t)
	for name, drift := range map[string][2]string{
		"a changed call":         {"luascript.New(client)", "luascript.New(client, nil)"},
		"a dropped import":       {"\t_ \"github.com/jackc/pgx/v5/stdlib\"", ""},
		"an unchecked error":     {"if err := stock.Init(ctx, \"sneaker-42\", 10); err != nil {\n\t\tlog.Fatal(err)\n\t}\n}", "_ = stock.Init(ctx, \"sneaker-42\", 10)\n}"},
		"a changed contract":     {"Get(ctx context.Context, sku string) (int64, error)", "Get(ctx context.Context, sku string) int64"},
		"a fragment, not a file": {"package main\n\nimport (\n\t\"context\"", "import (\n\t\"context\""},
	} {
		if !strings.Contains(string(readme), drift[0]) {
			t.Fatalf("%s: README.md and docs/ no longer have %q: update the drift", name, drift[0])
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
				errs = append(errs, fmt.Errorf("Go block %d (%q) is not, as written, a file under %s: copy it from there", i+1, first, snippetDir))
			}
			continue
		}
		d, err := declarations(b, false)
		if err != nil || len(d) == 0 {
			errs = append(errs, fmt.Errorf("Go block %d (%q) is neither a whole file nor declarations: %v", i+1, first, err))
			continue
		}
		for _, s := range d {
			if !decls[s] {
				errs = append(errs, fmt.Errorf("Go block %d (%q) declares what stock.go does not:\n%s", i+1, first, s))
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

// TestDocLinks: every relative link of README.md and of the pages under
// docs/ names a file that exists, and a #fragment names a heading of the
// page it points to (as GitHub makes its anchors).
func TestDocLinks(t *testing.T) {
	docs := docFiles(t)
	for _, p := range sortedKeys(docs) {
		for _, err := range checkLinks(p, docs[p]) {
			t.Error(err)
		}
	}
}

// The link check fails on a missing file and on a missing heading.
func TestDocLinksCatchBreakage(t *testing.T) {
	for name, md := range map[string]string{
		"a missing file":          "see [x](docs/no-such-page.md)",
		"a missing heading":       "see [x](docs/strategies.md#no-such-heading)",
		"a missing local heading": "# Title\n\nsee [x](#no-such-heading)",
	} {
		assert.NotEmpty(t, checkLinks("README.md", []byte(md)), name)
	}
	assert.Empty(t, checkLinks("README.md", []byte("# Title\n\n[a](#title) [b](docs/strategies.md#choosing-a-strategy) [c](https://example.com/x)")))
}

var (
	mdLink    = regexp.MustCompile(`\[[^\]]*\]\(([^)\s]+)\)`)
	fence     = regexp.MustCompile("(?ms)^```.*?^```")
	inlineRaw = regexp.MustCompile("`[^`\n]*`")
	heading   = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
)

// checkLinks returns one error per relative link of the Markdown page at
// path (relative to the repository's root) that does not resolve.
func checkLinks(path string, md []byte) []error {
	var errs []error
	text := fence.ReplaceAllString(string(md), "")
	for _, m := range mdLink.FindAllStringSubmatch(inlineRaw.ReplaceAllString(text, ""), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, frag, _ := strings.Cut(target, "#")
		dest := path
		if file != "" {
			dest = filepath.Join(filepath.Dir(path), file)
		}
		b, err := os.ReadFile(dest)
		if err != nil {
			if _, serr := os.Stat(dest); serr == nil && frag == "" {
				continue // a directory
			}
			errs = append(errs, fmt.Errorf("%s: link %q: %s does not exist", path, target, dest))
			continue
		}
		if dest == path {
			b = md
		}
		if frag != "" && !anchors(b)[frag] {
			errs = append(errs, fmt.Errorf("%s: link %q: %s has no heading with anchor #%s", path, target, dest, frag))
		}
	}
	return errs
}

// anchors returns the anchors GitHub gives the headings of a Markdown page:
// lower case, punctuation dropped, spaces made hyphens.
func anchors(md []byte) map[string]bool {
	out := map[string]bool{}
	text := fence.ReplaceAllString(string(md), "")
	for _, m := range heading.FindAllStringSubmatch(text, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// TestDocStrategyLists: the root package doc, README's chooser,
// docs/strategies.md's table and examples/httpservice's -strategy values
// name the same strategies, so that adding or dropping one fails here
// until every list says so.
func TestDocStrategyLists(t *testing.T) {
	lists := strategyLists(t)
	want := lists["package doc (stock.go)"]
	require.NotEmpty(t, want)
	for _, where := range sortedKeys(lists) {
		assert.Equal(t, want, lists[where], "%s names other strategies than the package doc", where)
	}
}

// strategyLists returns each list of strategies, sorted, by where it is.
func strategyLists(t *testing.T) map[string][]string {
	t.Helper()
	lists := map[string][]string{}

	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "stock.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	m := regexp.MustCompile(`strategy in this module \(([^)]*)\)`).FindStringSubmatch(strings.Join(strings.Fields(f.Doc.Text()), " "))
	require.NotNil(t, m, "stock.go's package doc no longer says \"strategy in this module (...)\": update this test")
	lists["package doc (stock.go)"] = splitList(m[1])

	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	lists["README.md's chooser"] = tableColumn(t, readme, "## Which strategy", 1, true)

	page, err := os.ReadFile("docs/strategies.md")
	require.NoError(t, err)
	lists["docs/strategies.md's table"] = tableColumn(t, page, "## Choosing a strategy", 0, false)

	main, err := os.ReadFile("examples/httpservice/main.go")
	require.NoError(t, err)
	hm := regexp.MustCompile(`(?m)^const strategies = "([^"]*)"`).FindSubmatch(main)
	require.NotNil(t, hm, "examples/httpservice/main.go no longer has const strategies: update this test")
	lists["examples/httpservice -strategy"] = splitList(string(hm[1]))
	return lists
}

// splitList splits "a, b, c and d" (or "... or d").
func splitList(s string) []string {
	var out []string
	for _, f := range regexp.MustCompile(`,|\band\b|\bor\b`).Split(s, -1) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// tableColumn returns the `code` names in column col of the first table
// after the heading under, sorted and without repeats: every name of a cell
// when all is true, else only its first.
func tableColumn(t *testing.T, md []byte, under string, col int, all bool) []string {
	t.Helper()
	_, rest, ok := strings.Cut(string(md), "\n"+under+"\n")
	require.True(t, ok, "no heading %q", under)
	seen := map[string]bool{}
	inTable := false
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(line, "|")
		if len(cells) <= col+1 || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		names := regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(cells[col+1], -1)
		if !all && len(names) > 1 {
			names = names[:1]
		}
		for _, n := range names {
			seen[n[1]] = true
		}
	}
	require.NotEmpty(t, seen, "no table after %q", under)
	return sortedKeys(seen)
}

// TestDocOrderManagers: which strategies take orders, as README's chooser
// and docs/orders.md say, is which strategies' Managers implement
// inventory.OrderManager. When one gains (or loses) the order calls, this
// fails until the chooser's cell and the sentence of docs/orders.md say so.
func TestDocOrderManagers(t *testing.T) {
	om := reflect.TypeFor[inventory.OrderManager]()
	has := map[string]bool{
		"luascript":  reflect.TypeFor[*luascript.Manager]().Implements(om),
		"optimistic": reflect.TypeFor[*optimistic.Manager]().Implements(om),
		"rowlock":    reflect.TypeFor[*rowlock.Manager]().Implements(om),
		"redislock":  reflect.TypeFor[*redislock.Manager]().Implements(om),
		"redlock":    reflect.TypeFor[*redlock.Manager]().Implements(om),
		"zklock":     reflect.TypeFor[*zklock.Manager]().Implements(om),
		"sqllock":    reflect.TypeFor[*lockmgr.Manager]().Implements(om), // sqllock.New's
		"tiered":     reflect.TypeFor[*tiered.Manager]().Implements(om),
	}
	require.Equal(t, strategyLists(t)["package doc (stock.go)"], sortedKeys(has), "a strategy this test does not know: add it")

	// README's chooser: a strategy's row says "yes" or "not yet".
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), "\n## Which strategy\n")
	require.True(t, ok)
	chooser := map[string]bool{}
	for _, line := range strings.Split(rest, "\n") {
		cells := strings.Split(line, "|")
		if !strings.HasPrefix(line, "|") || len(cells) < 5 {
			continue
		}
		for _, n := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(cells[2], -1) {
			chooser[n[1]] = strings.HasPrefix(strings.TrimSpace(cells[3]), "yes")
		}
	}
	assert.Equal(t, has, chooser, "README's chooser (carts and holds) disagrees with the Managers")

	// docs/orders.md: "Every strategy's Manager [but `x`'s] is also an
	// `inventory.OrderManager`".
	page, err := os.ReadFile("docs/orders.md")
	require.NoError(t, err)
	m := regexp.MustCompile("Every strategy's Manager (but (.*?) )?is also an `inventory.OrderManager`").FindStringSubmatch(strings.Join(strings.Fields(string(page)), " "))
	require.NotNil(t, m, "docs/orders.md no longer says which strategies take orders in one sentence: update this test")
	orders := map[string]bool{}
	for s := range has {
		orders[s] = true
	}
	for _, n := range regexp.MustCompile("`([a-z]+)`").FindAllStringSubmatch(m[2], -1) {
		orders[n[1]] = false
	}
	assert.Equal(t, has, orders, "docs/orders.md disagrees with the Managers")
}
