package inventory_test

import (
	"go/ast"
	"go/doc"
	"go/parser"
	"go/printer"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDocShowsNoInternalNames checks that what `go doc` shows of the root
// package, the user's API, names no package of this module: an internal
// type in an exported declaration is noise for a user.
func TestDocShowsNoInternalNames(t *testing.T) {
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, parser.ParseComments)
		require.NoError(t, err)
		files = append(files, f)
	}
	p, err := doc.NewFromFiles(fset, files, "github.com/stockkit/inventory")
	require.NoError(t, err)
	decls := map[string]ast.Node{}
	for _, c := range append(p.Consts, p.Vars...) {
		decls[strings.Join(c.Names, ",")] = c.Decl
	}
	add := func(fs []*doc.Func) {
		for _, f := range fs {
			f.Decl.Body = nil
			decls[f.Name] = f.Decl
		}
	}
	add(p.Funcs)
	for _, ty := range p.Types {
		decls[ty.Name] = ty.Decl
		add(ty.Funcs)
		add(ty.Methods)
	}
	require.Contains(t, decls, "Option")
	for name, d := range decls {
		var b strings.Builder
		require.NoError(t, printer.Fprint(&b, fset, d))
		for _, internal := range []string{"callopt.", "driver.", "front."} {
			require.NotContains(t, b.String(), internal, "the declaration of %s, as go doc shows it", name)
		}
	}
}
