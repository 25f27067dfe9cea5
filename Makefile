# lockfree: `make test` starts PostgreSQL, Kafka and Redis (scripts/) and runs
# every test against them, the failover tests last (`make test-failover`).
SHELL := /bin/bash
GO ?= go
GOTESTFLAGS ?= -race -count=1 -timeout 30m
SERVICES_ENV = eval "$$(scripts/postgres.sh env)" && eval "$$(scripts/kafka.sh env)" && \
	eval "$$(scripts/redis.sh env)"

.PHONY: test test-failover services services-down lint bench compare

# The failover tests: each test binary makes a PostgreSQL primary and standby
# of its own (scripts/pg-replication.sh) and kills, isolates and promotes
# them. They run after the other tests, so as not to share the CPU with them.
FAILOVER_PKGS = ./internal/failover/... ./internal/testrepl/...

test: services
	@$(SERVICES_ENV) && $(GO) test $(GOTESTFLAGS) \
		$$($(GO) list ./... | grep -v -E '/internal/(failover|testrepl)$$')
	@$(MAKE) --no-print-directory test-failover

test-failover: services
	@$(SERVICES_ENV) && $(GO) test $(GOTESTFLAGS) $(FAILOVER_PKGS)

services:
	@scripts/postgres.sh up
	@scripts/kafka.sh up
	@scripts/redis.sh up
	@echo "services up; for your shell:" >&2
	@scripts/postgres.sh env >&2
	@scripts/kafka.sh env >&2
	@scripts/redis.sh env >&2

services-down:
	@scripts/redis.sh down
	@scripts/kafka.sh down
	@scripts/postgres.sh down

GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...

bench: services
	@$(SERVICES_ENV) && $(GO) test -run '^$$' -bench . -benchtime 2s ./...

compare:
	$(GO) run ./cmd/lockfree compare
