# Test, benchmark and lint targets. `make test` starts the servers the tests need
# (scripts/services.sh: Redis, Redis Cluster, MariaDB, PostgreSQL, ZooKeeper).
#
#   make test                      all tests with the race detector, then the NORACE
#                                  pass; every module and pass runs, failures listed at the end
#   make sums                      fails when go.work.sum is out of date (make test checks it)
#   make bench [BENCH=regex]       the comparisons (integration/bench); writes docs/benchmarks.md's table
#   make bench-check               a second run, checked against the first; marks unstable rows
#   make microbench [BENCH=regex] [PKG=./internal/foo/...]   the per-package benchmarks
#   make soak                      long-running tests behind the soak build tag
#   make drills [DRILLS=regex]     failover drills on private Sentinel, Cluster and ZooKeeper deployments
#   make lint                      gofmt, go vet, staticcheck, banned modules, every go.mod tidy
#
# The repository holds three modules, tied by go.work: the library (root),
# examples/ and integration/ (fault, stall and soak tests, and the SQLite
# driver). go test ./... does not descend into nested modules, so each
# target runs once per module (MODULES); PKG is a pattern within each.

GO ?= go
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
PKG ?= ./...
BENCH ?= .
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

MODULES ?= . examples integration

# The root module does not require modernc.org/sqlite; the SQLite runs of its
# tests get the driver from integration/sqlite/driver.go.in, overlaid into
# internal/testenv (go.work puts modernc.org/sqlite in the build list).
OVERLAY := $(CURDIR)/integration/sqlite/overlay.json
GOTEST = $(GO) test -overlay=$(OVERLAY)

# Modules the root go.mod must never require: a program importing one
# strategy must not find them in its go.sum (issue 10.5).
BANNED := github.com/Shopify/toxiproxy github.com/prometheus/ github.com/rs/zerolog github.com/gorilla/mux github.com/alicebob/miniredis modernc.org/

# -race needs cgo.
export CGO_ENABLED := 1

.PHONY: services test sums norace bench bench-check microbench soak drills lint overlay modules banned tidy

services:
	bash scripts/services.sh

# Tests behind //go:build !race (a data race inside go-zookeeper itself,
# zk PR #35, on reconnection: zklock's flaky-connection, stall and network
# fault tests; a sale of 10,000 goroutines, past the race
# detector's 8,128) run in a second pass without the race detector: NORACE
# lists module:package:test-regex triples.
NORACE ?= .:./zklock/:^TestFlakyConnection$$ integration:./zklock/:^TestStall$$ integration:./zklock/:^TestNetworkFaults$$ integration:./segment/:^TestSale$$

# overlay writes the overlay file (absolute paths, so it works from every module).
overlay:
	@printf '{"Replace":{"%s":"%s"}}\n' "$(CURDIR)/internal/testenv/sqlite_driver.go" "$(CURDIR)/integration/sqlite/driver.go.in" > $(OVERLAY)

# modules fails if go.work lists a module MODULES does not, or the reverse.
modules:
	@want="$$(for m in $(MODULES); do (cd $$m && pwd -P); done | sort)"; \
	have="$$($(GO) list -m -f '{{.Dir}}' | xargs -n1 sh -c 'cd "$$0" && pwd -P' | sort)"; \
	if [ "$$want" != "$$have" ]; then echo "MODULES ($(MODULES)) and go.work differ:"; echo "$$have"; exit 1; fi

# test runs two passes, the race pass (every module's $(PKG) under -race)
# and the NORACE pass. Every module and both passes run whatever fails
# before them; the target fails at the end, naming each failure. A PKG
# pattern that names no directory of a module (PKG=./internal/outcome/...
# in examples/) is left out of that module's run, which says so. The run
# also fails when it changed go.work.sum (see sums), which it checks for
# every package of every module whatever PKG is.
test: services overlay modules banned
	@failed=""; sum0="$$(mktemp)"; cat go.work.sum > "$$sum0" 2>/dev/null; \
	$(MAKE) --no-print-directory sums || failed="$$failed go.work.sum"; \
	for m in $(MODULES); do \
		pkgs=""; \
		for p in $(PKG); do \
			case "$$p" in \
			.|./*) [ -d "$$m/$${p%/...}" ] && pkgs="$$pkgs $$p" ;; \
			*) pkgs="$$pkgs $$p" ;; \
			esac; \
		done; \
		if [ -z "$$pkgs" ]; then echo "== $$m: no directory for PKG=$(PKG): not run"; continue; fi; \
		echo "== $$m: go test -race$$pkgs"; \
		(cd $$m && $(GOTEST) -race -count=1 -timeout 25m $$pkgs) || failed="$$failed $$m(race)"; \
	done; \
	$(MAKE) --no-print-directory norace || failed="$$failed norace"; \
	if ! cat go.work.sum 2>/dev/null | cmp -s - "$$sum0"; then \
		echo "make test changed go.work.sum (commit the change):"; cat go.work.sum 2>/dev/null | diff -u "$$sum0" - ; \
		case "$$failed" in *go.work.sum*) ;; *) failed="$$failed go.work.sum" ;; esac; \
	fi; rm -f "$$sum0"; \
	if [ -n "$$failed" ]; then echo "make test: FAILED:$$failed"; exit 1; fi; \
	echo "make test: every module and both passes ok"

# sums loads every package and test of every module, as go test does, and
# fails when that changed go.work.sum. In workspace mode a checksum that no
# module's go.sum holds is fetched and written to go.work.sum without a
# word (a go.mod requirement added without its go.sum lines is enough), so
# a stale go.work.sum would be rewritten by every make test in every clone;
# this makes it a failure, with the change left in place to commit.
sums: overlay
	@sum0="$$(mktemp)"; cat go.work.sum > "$$sum0" 2>/dev/null; \
	for m in $(MODULES); do (cd $$m && $(GO) list -overlay=$(OVERLAY) -deps -test ./... >/dev/null) || { rm -f "$$sum0"; exit 1; }; done; \
	if ! cat go.work.sum 2>/dev/null | cmp -s - "$$sum0"; then \
		echo "go.work.sum was out of date; loading the modules changed it (commit the change):"; \
		cat go.work.sum 2>/dev/null | diff -u "$$sum0" - ; rm -f "$$sum0"; exit 1; \
	fi; rm -f "$$sum0"

# norace runs the NORACE tests (make test's second pass), every one of
# them whatever fails, and fails at the end if any failed.
norace: overlay
	@failed=""; \
	for t in $(NORACE); do \
		m=$${t%%:*}; t=$${t#*:}; \
		echo "== $$m: go test $${t%%:*} -run '$${t#*:}' (no -race)"; \
		(cd $$m && $(GOTEST) -count=1 -timeout 10m -run "$${t#*:}" $${t%%:*}) || failed="$$failed $$m:$$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "make norace: FAILED:$$failed"; exit 1; fi

# bench runs the comparisons of integration/bench (integration/internal/benchcmp:
# each strategy against its baseline in BENCH_ROUNDS alternating rounds of
# BENCH_ROUND per side), writes the run to $(BENCH_RESULTS)/run.json and
# the generated block of docs/benchmarks.md from it. bench-check runs them again into
# check.json and rewrites the block from run.json, each row checked against
# the second run (unstable when either median lies outside the other run's
# min-max). Regenerate the table with `make bench bench-check` (about 31 min
# on 2 cores). With a BENCH filter, bench writes partial.json and prints
# the table of the rows it ran, leaving run.json and docs/benchmarks.md alone.
BENCH_ROUNDS ?= 10
BENCH_ROUND ?= 500ms
BENCH_RESULTS := $(CURDIR)/integration/bench/results
BENCHCMP = cd integration && $(GOTEST) -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 60m ./bench/ \
	-args -benchcmp.rounds $(BENCH_ROUNDS) -benchcmp.round $(BENCH_ROUND)
BENCHTABLE = cd integration && $(GO) run ./internal/benchcmp/benchtable

bench: services overlay modules
ifeq ($(BENCH),.)
	$(BENCHCMP) -benchcmp.out $(BENCH_RESULTS)/run.json
	rm -f $(BENCH_RESULTS)/check.json
	$(BENCHTABLE) -doc $(CURDIR)/docs/benchmarks.md -run $(BENCH_RESULTS)/run.json
else
	$(BENCHCMP) -benchcmp.out $(BENCH_RESULTS)/partial.json
	$(BENCHTABLE) -run $(BENCH_RESULTS)/partial.json
endif

bench-check: services overlay modules
	$(BENCHCMP) -benchcmp.out $(BENCH_RESULTS)/check.json
	$(BENCHTABLE) -doc $(CURDIR)/docs/benchmarks.md -run $(BENCH_RESULTS)/run.json -check $(BENCH_RESULTS)/check.json

# microbench runs the plain per-package benchmarks of the root and examples
# modules (the comparisons are bench's).
microbench: services overlay modules
	set -e; for m in . examples; do (cd $$m && $(GOTEST) -run '^$$' -bench '$(BENCH)' -benchtime 2s -timeout 60m $(PKG)); done

soak: services overlay
	cd integration && $(GOTEST) -v -count=1 -run Soak -tags soak -timeout 60m ./soak/

# banned fails if the root go.mod requires any of BANNED, directly or not.
banned:
	@mods="$$(GOWORK=off $(GO) list -m all)" || exit 1; \
	bad="$$(echo "$$mods" | grep -F $(patsubst %,-e '%',$(BANNED)) || true)"; \
	if [ -n "$$bad" ]; then echo "the root go.mod requires banned modules (move their importers to integration/ or examples/):"; echo "$$bad"; exit 1; fi

# drills rehearses failovers mid-sale on private replicated deployments
# (integration/drills, build tag drills): a Redis primary with two replicas
# behind three sentinels, a Cluster of three masters with a replica each, a
# ZooKeeper ensemble of three, each started from Debian's packages
# (scripts/drills.sh installs them) on free loopback ports and killed at the
# end. It prints the table of the durability doc and fails when a drill
# misses its target (about 11 min on 2 cores). DRILLS selects drills by
# go test -run pattern (DRILLS=TestZooKeeper: 40 s).
DRILLS ?= .
drills: overlay
	bash scripts/drills.sh
	cd integration/drills && $(GOTEST) -tags drills -count=1 -timeout 40m -run '$(DRILLS)'

# tidy fails when a module's go.mod or go.sum is not what go mod tidy makes
# of it (a requirement marked // indirect though imported directly, one
# missing or unused), printing the difference. go mod tidy reads one module
# and ignores go.work; GOWORK=off says so.
tidy:
	@failed=""; for m in $(MODULES); do \
		(cd $$m && GOWORK=off $(GO) mod tidy -diff) || failed="$$failed $$m"; \
	done; \
	if [ -n "$$failed" ]; then echo "go.mod not tidy in:$$failed (run go mod tidy there)"; exit 1; fi

lint: overlay modules banned tidy
	@unformatted="$$($(GOFMT) -l .)" || exit 1; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; \
	fi
	set -e; for m in $(MODULES); do (cd $$m && $(GO) vet -overlay=$(OVERLAY) $(PKG) && $(GO) run $(STATICCHECK) $(PKG)); done
	cd integration && $(GO) vet -overlay=$(OVERLAY) -tags drills ./drills/ && $(GO) run $(STATICCHECK) -tags drills ./drills/
	cd integration && $(GO) vet -overlay=$(OVERLAY) -tags soak ./soak/ && $(GO) run $(STATICCHECK) -tags soak ./soak/
