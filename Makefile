# Test, benchmark and lint targets. `make test` starts the servers the tests need
# (scripts/services.sh: Redis, Redis Cluster, MariaDB, PostgreSQL, ZooKeeper).
#
#   make test                      all tests with the race detector
#   make bench [BENCH=regex] [PKG=./internal/foo/...]
#   make soak                      long-running tests behind the soak build tag
#   make lint                      gofmt, go vet, staticcheck, banned modules
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

.PHONY: services test bench soak lint overlay modules banned

services:
	bash scripts/services.sh

# Tests behind //go:build !race (a data race inside go-zookeeper itself,
# zk PR #35) run in a second pass without the race detector.
NORACE_TESTS ?= ^TestFlakyConnection$$
NORACE_PKGS ?= ./zklock/

# overlay writes the overlay file (absolute paths, so it works from every module).
overlay:
	@printf '{"Replace":{"%s":"%s"}}\n' "$(CURDIR)/internal/testenv/sqlite_driver.go" "$(CURDIR)/integration/sqlite/driver.go.in" > $(OVERLAY)

# modules fails if go.work lists a module MODULES does not, or the reverse.
modules:
	@want="$$(for m in $(MODULES); do (cd $$m && pwd -P); done | sort)"; \
	have="$$($(GO) list -m -f '{{.Dir}}' | xargs -n1 sh -c 'cd "$$0" && pwd -P' | sort)"; \
	if [ "$$want" != "$$have" ]; then echo "MODULES ($(MODULES)) and go.work differ:"; echo "$$have"; exit 1; fi

test: services overlay modules banned
	set -e; for m in $(MODULES); do (cd $$m && $(GOTEST) -race -count=1 -timeout 25m $(PKG)); done
	$(GOTEST) -count=1 -timeout 5m -run '$(NORACE_TESTS)' $(NORACE_PKGS)

bench: services overlay modules
	set -e; for m in $(MODULES); do (cd $$m && $(GOTEST) -run '^$$' -bench '$(BENCH)' -benchtime 2s -timeout 60m $(PKG)); done

soak: services overlay
	cd integration && $(GOTEST) -v -count=1 -run Soak -tags soak -timeout 60m ./soak/

# banned fails if the root go.mod requires any of BANNED, directly or not.
banned:
	@mods="$$(GOWORK=off $(GO) list -m all)" || exit 1; \
	bad="$$(echo "$$mods" | grep -F $(patsubst %,-e '%',$(BANNED)) || true)"; \
	if [ -n "$$bad" ]; then echo "the root go.mod requires banned modules (move their importers to integration/ or examples/):"; echo "$$bad"; exit 1; fi

lint: overlay modules banned
	@unformatted="$$($(GOFMT) -l .)" || exit 1; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; \
	fi
	set -e; for m in $(MODULES); do (cd $$m && $(GO) vet -overlay=$(OVERLAY) $(PKG) && $(GO) run $(STATICCHECK) $(PKG)); done
