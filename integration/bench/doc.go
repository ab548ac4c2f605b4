// Package bench holds the comparisons behind the benchmark table of
// docs/benchmarks.md: each strategy against the naive form it replaces, on
// the servers of `make services`, measured with benchcmp
// (integration/internal/benchcmp) in alternating rounds. It has no code of its own outside its tests: `make
// bench` runs them and writes the table.
package bench
