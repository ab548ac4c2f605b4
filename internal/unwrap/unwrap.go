// Package unwrap finds the manager under a stack of decorators, to name its
// strategy in metrics and logs.
package unwrap

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/stockkit/inventory"
)

// Wrapper is a decorator: it returns the manager it wraps.
type Wrapper interface {
	Unwrap() inventory.StockManager
}

// Innermost returns the manager under every decorator of m.
func Innermost(m inventory.StockManager) inventory.StockManager {
	for {
		w, ok := m.(Wrapper)
		if !ok {
			return m
		}
		m = w.Unwrap()
	}
}

// Strategy is the last element of the package path of the innermost
// manager's type ("luascript" for a *luascript.Manager), or "unknown".
func Strategy(m inventory.StockManager) string {
	t := reflect.TypeOf(Innermost(m))
	if t == nil {
		return "unknown"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	p := t.PkgPath()
	if p == "" {
		return "unknown"
	}
	return p[strings.LastIndexByte(p, '/')+1:]
}

// Name is the strategy decorator pkg names m by: name when its
// WithStrategy option gave one (named), which must not be empty, else
// [Strategy] of m. An empty name is an error wrapping
// [inventory.ErrInvalidArgument].
func Name(pkg string, m inventory.StockManager, name string, named bool) (string, error) {
	switch {
	case !named:
		return Strategy(m), nil
	case name == "":
		return "", fmt.Errorf("%w: %s: empty strategy name", inventory.ErrInvalidArgument, pkg)
	}
	return name, nil
}
