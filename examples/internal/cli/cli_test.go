package cli

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestStatus(t *testing.T) {
	errDrift := errors.New("drift found")
	exits := []Exit{{Err: errDrift, Code: 3}}
	for _, tc := range []struct {
		err    error
		code   int
		stderr string
	}{
		{nil, 0, ""},
		{flag.ErrHelp, 0, ""},
		{fmt.Errorf("parse: %w", ErrUsage), 2, ""},
		{fmt.Errorf("check: %w", errDrift), 3, ""},
		{errors.New("boom"), 1, "prog: boom\n"},
	} {
		var stderr strings.Builder
		assert.Equal(t, tc.code, status("prog", tc.err, &stderr, exits), "%v", tc.err)
		assert.Equal(t, tc.stderr, stderr.String(), "%v", tc.err)
	}
	assert.Equal(t, 2, status("prog", ErrUsage, &strings.Builder{}, nil), "ErrUsage without exits")
}
