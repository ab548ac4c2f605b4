package benchcmp

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Env is the machine a run ran on, and how it ran.
type Env struct {
	Start, End time.Time
	// NumCPU is the number of logical CPUs; CPU the model name
	// (/proc/cpuinfo), MemGiB the memory.
	NumCPU int
	CPU    string
	MemGiB float64
	Go     string
	// Versions maps a server ("Redis", "MariaDB", ...) to its version.
	Versions map[string]string
	// Load1Start and Load1End are the 1-minute load averages at the
	// start and the end of the run.
	Load1Start, Load1End float64
	Config               Config
}

// Report is one run: its Env and the result of every case, groups in the
// order they first ran.
type Report struct {
	Env     Env
	Results []Result
}

// Machine describes this machine, with Start set to now.
func Machine() Env {
	e := Env{Start: time.Now().UTC(), NumCPU: runtime.NumCPU(), Go: runtime.Version(), Load1Start: load1()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				e.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var kb float64
			if _, err := fmt.Sscanf(sc.Text(), "MemTotal: %f kB", &kb); err == nil {
				e.MemGiB = kb / (1 << 20)
				break
			}
		}
		f.Close()
	}
	return e
}

// WriteReport writes r to path as indented JSON.
func WriteReport(path string, r Report) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("benchcmp: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("benchcmp: %w", err)
	}
	return nil
}

// ReadReport reads a Report that WriteReport wrote.
func ReadReport(path string) (Report, error) {
	var r Report
	b, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("benchcmp: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("benchcmp: %s: %w", path, err)
	}
	return r, nil
}
