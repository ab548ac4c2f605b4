//go:build !unix

package otelstock_test

import "time"

// cpuTime is unknown here: BenchmarkCall reports 0.
func cpuTime() time.Duration { return 0 }
