// Command benchtable writes the benchmark table of docs/benchmarks.md from a
// benchcmp run.
//
//	benchtable -run first.json [-check second.json] [-doc docs/benchmarks.md]
//
// It reads the run that -run names (written by the integration/bench
// benchmarks with -benchcmp.out), renders it as benchcmp.Table does and
// replaces the block between benchcmp's markers in the -doc file; with
// -check, every row is compared with the same case in a second run and
// marked unstable when either median ratio lies outside the other run's
// min-max. Without -doc it prints the block. It always prints the rows
// of both runs side by side on stderr.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/stockkit/inventory/integration/internal/benchcmp"
)

func main() {
	runPath := flag.String("run", "", "the run the table shows (JSON from -benchcmp.out)")
	checkPath := flag.String("check", "", "a second run to check the first against (optional)")
	doc := flag.String("doc", "", "the Markdown file whose marked block to replace, docs/benchmarks.md (default: print the block)")
	flag.Parse()
	if err := run(*runPath, *checkPath, *doc); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(runPath, checkPath, docPath string) error {
	if runPath == "" {
		return fmt.Errorf("-run is required")
	}
	r, err := benchcmp.ReadReport(runPath)
	if err != nil {
		return err
	}
	var check *benchcmp.Report
	if checkPath != "" {
		c, err := benchcmp.ReadReport(checkPath)
		if err != nil {
			return err
		}
		check = &c
	}
	summary(r, check)
	block := benchcmp.Table(r, check)
	if docPath == "" {
		fmt.Print(block)
		return nil
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return err
	}
	out, err := benchcmp.ReplaceBlock(string(doc), block)
	if err != nil {
		return fmt.Errorf("%s: %w", docPath, err)
	}
	return os.WriteFile(docPath, []byte(out), 0o644)
}

// summary prints every row of r, beside check's, on stderr.
func summary(r benchcmp.Report, check *benchcmp.Report) {
	var byID map[string]benchcmp.Result
	if check != nil {
		byID, _ = benchcmp.Check(r, *check)
	}
	for _, x := range r.Results {
		line := fmt.Sprintf("%-50s %6s (%s-%s) %10s/%-10s", x.ID(), benchcmp.Ratio(x.Median), benchcmp.Ratio(x.Min), benchcmp.Ratio(x.Max),
			benchcmp.Ops(x.StrategyMedian()), benchcmp.Ops(x.BaselineMedian()))
		if x.Err != "" {
			line = fmt.Sprintf("%-50s failed: %s", x.ID(), x.Err)
		}
		if check != nil {
			c, ok := byID[x.ID()]
			switch {
			case !ok:
				line += "  second run: none  UNSTABLE"
			default:
				line += fmt.Sprintf("  second run: %6s (%s-%s) %10s/%-10s", benchcmp.Ratio(c.Median), benchcmp.Ratio(c.Min), benchcmp.Ratio(c.Max),
					benchcmp.Ops(c.StrategyMedian()), benchcmp.Ops(c.BaselineMedian()))
				if !benchcmp.Stable(x, c) {
					line += "  UNSTABLE"
				}
			}
		}
		fmt.Fprintln(os.Stderr, line)
	}
}
