# lockfree is three Go modules tied by go.work: the library (the root), the
# lab (cmd/lockfree: `lockfree compare`) and the examples (examples/).
# `make test` covers all three; `make test-lib` the library module alone.
#
# `make test` starts PostgreSQL, Kafka and Redis (scripts/), makes
# sure headless Chromium is there for the HTML report's browser test
# (scripts/chromium.sh), and runs every test against them: the scale tests
# after the others (`make test-scale`), then four at once, each one's
# output printed whole when it ends: the harness's hunt of every mutant
# (`make mutants`), the failover tests (`make test-failover`), the mutant
# builds (`make test-mutants`) and the Kafka cluster's fault tests
# (`make test-kafka-cluster`). The failover and cluster tests spend their
# minutes waiting for a standby to be promoted, or brokers to stop, fail
# over and come back, each on servers of its own; the package tests are
# short, one process each; the hunt's runs mostly wait out leases.
SHELL := /bin/bash
GO ?= go
GOTESTFLAGS ?= -race -count=1 -timeout 30m
SERVICES_ENV = eval "$$(scripts/postgres.sh env)" && eval "$$(scripts/kafka.sh env)" && \
	eval "$$(scripts/redis.sh env)"

# Every package of the three modules; LIB_PKGS the library's alone.
ALL_PKGS = $(GO) list ./... ./cmd/lockfree/... ./examples/...
LIB_PKGS = $(GO) list ./...
SERIAL_PKGS = '/internal/(failover|replpair|kafkacluster|comparefailover|comparecluster)$$'

.PHONY: docs-check test test-lib test-scale test-failover test-mutants test-kafka-cluster mutants soak services services-down browser lint tidy bench compare screenshot

# The failover tests: each test binary makes a PostgreSQL primary and standby
# of its own (scripts/pg-replication.sh) and kills, isolates and promotes
# them. They run after the other tests, beside the mutant hunt and the
# cluster's tests, whose brokers are as idle between faults.
# cmd/lockfree/internal/comparefailover runs `lockfree compare --faults
# failover` through the harness (documents and inventory, 4 approaches;
# singleton's two leaders; 10 s each: about two minutes).
FAILOVER_PKGS = ./internal/failover/... ./internal/replpair/... ./cmd/lockfree/internal/comparefailover/...

# The longest packages go first: go test starts packages in the order given,
# two at a time, and the lab's engine (about seven minutes beside the others)
# or its cli (about four) started last would run alone at the end.
LONG_PKGS = '/cmd/lockfree/internal/(engine|history|cli)$$'

test: services browser
	@$(SERVICES_ENV) && eval "$$(scripts/chromium.sh env)" && $(GO) test $(GOTESTFLAGS) -skip $(SCALE_TESTS) \
		$$($(ALL_PKGS) | grep -E $(LONG_PKGS)) $$($(ALL_PKGS) | grep -v -E $(SERIAL_PKGS)'|'$(LONG_PKGS))
	@$(MAKE) --no-print-directory test-scale
	@$(MAKE) --no-print-directory -j4 --output-sync=target mutants test-failover test-mutants test-kafka-cluster

# The scale tests: 64 worker processes in one Kafka consumer group, whose
# heartbeats a machine busy with other packages' tests answers too late
# (the group never settles). They run alone, after the other tests.
SCALE_TESTS = '^TestEventsManyClients$$'

test-scale: services
	@$(SERVICES_ENV) && $(GO) test $(GOTESTFLAGS) -run $(SCALE_TESTS) ./cmd/lockfree/internal/engine/

# The library module alone, with the services (no lab, no examples).
test-lib: services
	@$(SERVICES_ENV) && $(GO) test $(GOTESTFLAGS) $$($(LIB_PKGS) | grep -v -E $(SERIAL_PKGS))

test-failover: services
	@$(SERVICES_ENV) && $(GO) test $(GOTESTFLAGS) $(FAILOVER_PKGS)

# The fault tests of the Kafka consumer on a three-broker cluster
# (internal/kafkacluster): they kill, stop and isolate brokers, so they run
# alone, one at a time, then the zombie's foil in the mutant build, then
# `lockfree compare --faults broker-kill` through the harness
# (cmd/lockfree/internal/comparecluster). The
# cluster (KAFKA_BROKERS=3 scripts/kafka.sh, 512 MiB of heap per broker) is
# stopped afterwards, to give its memory back. scripts/kafka-faults.sh runs
# the same tests for the table of docs/singlewriter.md.
CLUSTER_ENV = eval "$$(KAFKA_BROKERS=3 scripts/kafka.sh env)"

test-kafka-cluster: services
	@KAFKA_BROKERS=3 scripts/kafka.sh up
	@status=0; $(SERVICES_ENV) && $(CLUSTER_ENV) && \
		$(GO) test $(GOTESTFLAGS) ./internal/kafkacluster/ && \
		$(GO) test $(GOTESTFLAGS) -tags lockfree_mutants -run '^TestZombieConsumerFoil$$' ./internal/kafkacluster/ && \
		$(GO) test $(GOTESTFLAGS) ./cmd/lockfree/internal/comparecluster/ \
		|| status=$$?; KAFKA_BROKERS=3 scripts/kafka.sh down; exit $$status

# The pages' budgets (internal/docscheck): README length, sentence and
# paragraph length, CHANGELOG's Unreleased section, the examples' main.go,
# relative links. make test runs it too.
docs-check:
	@$(GO) test -count=1 ./internal/docscheck/

browser:
	@scripts/chromium.sh >/dev/null

# docs/img/report.png, the README's picture of the HTML report.
screenshot: browser
	@eval "$$(scripts/chromium.sh env)" && $(GO) test -count=1 -run TestReportScreenshot ./cmd/lockfree/internal/report -update-screenshot

# The packages built with their mutant sites compiled in (internal/failpoint):
# each package's TestMutantsAreCaught shows that the test guarding a safety
# condition fails when the condition's mutant is on. Only those run: the
# packages' other tests, with every mutant off, are the default build's.
MUTANT_PACKAGES = ./fencedlock/ ./atomic/ ./idempotency/ ./idempotency/client/ ./internal/failpoint/ ./leader/ ./occ/ ./outbox/ ./partition/ ./singlewriter/kafkawriter/

test-mutants: services
	@$(SERVICES_ENV) && $(GO) test $(GOTESTFLAGS) -tags lockfree_mutants \
		-run '^(TestMutantsAreCaught|TestEnableMutant)$$' $(MUTANT_PACKAGES)

# The harness against every mutant site of failpoint's registry: one test
# binary with all of them compiled in, the mutant of each run chosen by
# $$LOCKFREE_MUTANTS in its workers, each run under the fault scenarios until
# one catches it (TestMutants, cmd/lockfree/internal/engine/mutants_test.go). It fails on
# a mutant that no scenario catches, unless the test's mutantHoles names it
# with why. It prints the table mutant → scenario → violations;
# MUTANTS_TABLE=file also writes it there (scripts/results.sh writes it into
# docs/results.md). No
# -race: the hunt's short runs need the workers' speed, and the harness's
# tests run under the race detector in `make test`. About 5 minutes.
# MUTANTS_RATE=5 runs each catching run 5 times in all and fails on a
# mutant caught in fewer (scripts/results.sh does, for docs/results.md).
# MUTANTS_RANDOM=3 also plays random fault schedules, seeds 1 to 3, on each
# mutant a scenario reaches (the re-created defects get 20 seeds of 20 s).
MUTANTS_TABLE ?=
MUTANTS_RATE ?= 1
MUTANTS_RANDOM ?= 0

mutants: services
	@$(SERVICES_ENV) && $(GO) test -v -count=1 -timeout 40m -tags lockfree_mutants -run '^TestMutants$$' \
		./cmd/lockfree/internal/engine -args -mutants-rate=$(MUTANTS_RATE) -mutants-random=$(MUTANTS_RANDOM) $(if $(MUTANTS_TABLE),-mutants-table=$(abspath $(MUTANTS_TABLE)))

# An hour of seeded random fault schedules over every scenario (SOAK=10m for
# less); its totals replace the soak section of docs/results.md.
soak: services
	@$(SERVICES_ENV) && ONLY=soak scripts/results.sh

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

# go mod tidy for each module (scripts/tidy.sh: the lab and the examples
# require the library at a placeholder version that go.work replaces).
tidy:
	@scripts/tidy.sh

GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0

lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./... ./cmd/lockfree/... ./examples/...
	$(GOLANGCI_LINT) run ./... ./cmd/lockfree/... ./examples/...
	@scripts/tidy.sh --check
	$(GO) test -count=1 ./internal/codecheck/ ./cmd/lockfree/internal/scenario/

bench: services
	@$(SERVICES_ENV) && $(GO) test -run '^$$' -bench . -benchtime 2s ./... ./cmd/lockfree/...

compare:
	$(GO) run ./cmd/lockfree compare
