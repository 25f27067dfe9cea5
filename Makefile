# lockfree: `make test` starts PostgreSQL and Kafka (scripts/) and runs every
# test against them.
SHELL := /bin/bash
GO ?= go
GOTESTFLAGS ?= -race -count=1 -timeout 30m
SERVICES_ENV = eval "$$(scripts/postgres.sh env)" && eval "$$(scripts/kafka.sh env)"

.PHONY: test services services-down lint bench compare

test: services
	@$(SERVICES_ENV) && $(GO) test $(GOTESTFLAGS) ./...

services:
	@scripts/postgres.sh up
	@scripts/kafka.sh up
	@echo "services up; for your shell:" >&2
	@scripts/postgres.sh env >&2
	@scripts/kafka.sh env >&2

services-down:
	@scripts/kafka.sh down
	@scripts/postgres.sh down

lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	@if command -v golangci-lint >/dev/null; then golangci-lint run ./...; else echo "golangci-lint not installed: ran gofmt and go vet" >&2; fi

bench: services
	@$(SERVICES_ENV) && $(GO) test -run '^$$' -bench . -benchtime 2s ./...

compare:
	$(GO) run ./cmd/lockfree compare
