package optiontest_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stockkit/inventory"
	"github.com/stockkit/inventory/internal/optiontest"
)

type option func(*int)

func set(n int) option { return func(v *int) { *v = n } }

// constructors: "good" follows the rule; the others each break it once.
var constructors = map[string]func(option) (any, error){
	"good": func(o option) (any, error) {
		v := 1
		if o != nil {
			o(&v)
		}
		if v < 1 {
			return nil, fmt.Errorf("%w: %d is below 1", inventory.ErrInvalidArgument, v)
		}
		return &v, nil
	},
	"accepts out of range": func(o option) (any, error) { v := 1; return &v, nil },
	"refuses in range":     func(o option) (any, error) { return nil, inventory.ErrInvalidArgument },
	"nil option panics":    func(o option) (any, error) { v := 1; o(&v); return &v, nil },
	"plain error": func(o option) (any, error) {
		v := 1
		if o != nil {
			o(&v)
		}
		if v < 1 {
			return nil, errors.New("below 1")
		}
		return &v, nil
	},
	"value with the error": func(o option) (any, error) {
		v := 1
		if o != nil {
			o(&v)
		}
		if v < 1 {
			return &v, inventory.ErrInvalidArgument
		}
		return &v, nil
	},
}

func run(t *testing.T, name string) {
	optiontest.Run(t, map[string]option{"one": set(1), "five": set(5)},
		map[string]option{"zero": set(0), "negative": set(-1)}, constructors[name])
}

// TestRun passes the constructor that follows the rule, and fails each
// broken one (run in a child process, so that its failure is observed).
func TestRun(t *testing.T) {
	if name := os.Getenv("OPTIONTEST_CHILD"); name != "" {
		run(t, name)
		return
	}
	run(t, "good")
	for name := range constructors {
		if name == "good" {
			continue
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestRun$")
		cmd.Env = append(os.Environ(), "OPTIONTEST_CHILD="+name)
		if out, err := cmd.CombinedOutput(); err == nil {
			t.Errorf("%s: Run passed it:\n%s", name, out)
		}
	}
}
