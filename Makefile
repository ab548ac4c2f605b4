# Test, benchmark and lint targets. `make test` starts the servers the tests need
# (scripts/services.sh: Redis, Redis Cluster, MariaDB, PostgreSQL, ZooKeeper).
#
#   make test                      all tests with the race detector
#   make bench [BENCH=regex] [PKG=./internal/foo/...]
#   make soak                      long-running tests behind the soak build tag
#   make lint                      gofmt, go vet, staticcheck

GO ?= go
GOFMT ?= $(shell $(GO) env GOROOT)/bin/gofmt
PKG ?= ./...
BENCH ?= .
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# -race needs cgo.
export CGO_ENABLED := 1

.PHONY: services test bench soak lint

services:
	bash scripts/services.sh

# Tests behind //go:build !race (a data race inside go-zookeeper itself,
# zk PR #35) run in a second pass without the race detector.
NORACE_TESTS ?= ^TestFlakyConnection$$
NORACE_PKGS ?= ./zklock/

test: services
	$(GO) test -race -count=1 -timeout 25m $(PKG)
	$(GO) test -count=1 -timeout 5m -run '$(NORACE_TESTS)' $(NORACE_PKGS)

bench: services
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 2s -timeout 60m $(PKG)

soak: services
	$(GO) test -v -count=1 -run Soak -tags soak -timeout 60m ./internal/soak/

lint:
	@unformatted="$$($(GOFMT) -l .)" || exit 1; \
	if [ -n "$$unformatted" ]; then \
		echo "gofmt -l: these files need gofmt -w:"; echo "$$unformatted"; exit 1; \
	fi
	$(GO) vet $(PKG)
	$(GO) run $(STATICCHECK) $(PKG)
