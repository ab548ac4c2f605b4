package faulttest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stockkit/inventory/internal/testenv"
)

// skewSource is a preloadable library that moves the wall clock of the
// process it is loaded into (clock_gettime of the CLOCK_REALTIME clocks,
// gettimeofday, time) by $INVENTORY_CLOCK_OFFSET_US microseconds, read once.
// It reads the real clock with the raw system call: it calls nothing that
// allocates, so unlike libfaketime it works in a redis-server linked with
// jemalloc (libfaketime hangs there: wolfcw/libfaketime#130). The monotonic
// clocks are left alone.
const skewSource = `#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long offset_ns(void) {
	static volatile int done;
	static volatile long long off;
	if (!done) {
		const char *s = getenv("INVENTORY_CLOCK_OFFSET_US");
		off = s ? atoll(s) * 1000LL : 0;
		done = 1;
	}
	return off;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		long long ns = (long long)ts->tv_sec * 1000000000LL + ts->tv_nsec + offset_ns();
		ts->tv_sec = ns / 1000000000LL;
		ts->tv_nsec = ns % 1000000000LL;
		if (ts->tv_nsec < 0) {
			ts->tv_nsec += 1000000000LL;
			ts->tv_sec--;
		}
	}
	return (int)r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0) {
		tv->tv_sec = ts.tv_sec;
		tv->tv_usec = ts.tv_nsec / 1000;
	}
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) {
		*t = ts.tv_sec;
	}
	return ts.tv_sec;
}
`

// SkewedRedis is a private redis-server whose wall clock (TIME, key
// expiry, everything a script reads) differs from this process's by an
// offset that the test sets.
type SkewedRedis struct {
	*Process
	shim string   // the preloadable library
	argv []string // redis-server's own command line
}

// StartSkewedRedis starts a private redis-server, as [StartRedis] does
// (its data in an append-only file synced on every write), whose wall
// clock runs offset ahead of this process's (behind, if offset is
// negative). It builds the small library that moves the clock with the C
// compiler cgo uses ($CC, else cc), and preloads it; without a compiler the
// test is skipped, or fails when CI=true. The server is killed when t
// ends.
func StartSkewedRedis(t testing.TB, offset time.Duration) *SkewedRedis {
	t.Helper()
	bin := require(t, "redis-server")
	env := require(t, "env")
	shim := buildSkew(t)
	port := FreePort(t)
	p := &Process{t: t, name: "redis-skewed-" + strconv.Itoa(port), addr: "127.0.0.1:" + strconv.Itoa(port)}
	r := &SkewedRedis{Process: p, shim: shim}
	r.argv = []string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", t.TempDir(),
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"}
	p.ready = func() error { return redisPing(p.addr) }
	r.setArgv(env, offset)
	p.start()
	t.Cleanup(p.Kill)
	return r
}

func (r *SkewedRedis) setArgv(env string, offset time.Duration) {
	r.Process.argv = append([]string{env, "LD_PRELOAD=" + r.shim,
		"INVENTORY_CLOCK_OFFSET_US=" + strconv.FormatInt(offset.Microseconds(), 10)}, r.argv...)
}

// SetOffset restarts the server, on the same port and data, with its wall
// clock offset from this process's.
func (r *SkewedRedis) SetOffset(offset time.Duration) {
	r.t.Helper()
	r.Kill()
	r.setArgv(r.Process.argv[0], offset)
	r.start()
}

// buildSkew compiles skewSource into a shared library in t's temporary
// directory and returns its path.
func buildSkew(t testing.TB) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	cc = require(t, cc)
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "skew.c"), filepath.Join(dir, "skew.so")
	if err := os.WriteFile(src, []byte(skewSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput()
	if err != nil {
		testenv.Missing(t, "a C compiler that builds the clock-skew library ("+cc+")", fmt.Errorf("%w: %s", err, out))
	}
	return lib
}
