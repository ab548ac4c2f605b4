// Package cli holds what the example programs share: how main runs a
// program's run function and turns its error into an exit status.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// ErrUsage reports bad flags; the flag package has already said why.
var ErrUsage = errors.New("usage")

// Exit is the exit status of a run whose error matches Err (errors.Is).
type Exit struct {
	Err  error
	Code int
}

// Main calls run with the program's arguments, standard output and
// standard error, under a context that SIGINT or SIGTERM cancels, and
// exits with its status: 0 on success or [flag.ErrHelp], the Code of the
// first of exits whose Err the error matches, 2 on [ErrUsage], or else 1
// after printing "name: error" to standard error.
func Main(name string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) error, exits ...Exit) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(status(name, err, os.Stderr, exits))
}

// status is the exit status Main gives err; it prints the error that
// status 1 reports to stderr.
func status(name string, err error, stderr io.Writer, exits []Exit) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	for _, e := range exits {
		if errors.Is(err, e.Err) {
			return e.Code
		}
	}
	if errors.Is(err, ErrUsage) {
		return 2
	}
	fmt.Fprintln(stderr, name+":", err)
	return 1
}
