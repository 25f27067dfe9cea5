#!/usr/bin/env bash
# Regenerates docs/results.md and the charts in docs/results/ by running
# `lockfree compare` for every scenario of the harness's registry
# (`lockfree compare --list`) on the local fault-injection PostgreSQL
# instance (scripts/postgres.sh): once without faults (the cost), then under
# each fault a stale holder's write lands under (pause, delay), and under
# each other fault on the first scenario it applies to (faults_of: the list
# says which), to keep the run within the hour; then the mutant hunt (`make mutants`, TestMutants in
# cmd/lockfree/internal/engine/mutants_test.go): its table mutant → scenario → violations.
#
#   scripts/results.sh                          # 10 s per approach under a fault, 8 workers;
#                                               # cost (no faults): 3 interleaved rounds of 5 s;
#                                               # sweeps: 2 s per approach and point
#   ROUNDS=5 COST_DURATION=10s SWEEP_DURATION=5s scripts/results.sh   # steadier, slower
#   ONLY=mutants scripts/results.sh             # the mutant section alone, in place
#   ONLY=soak SOAK=1h scripts/results.sh        # the soak section alone, in place (make soak)
#   DURATION=3s scripts/results.sh              # quicker, noisier
#   SCENARIOS="inventory documents" scripts/results.sh
#   FAULTS="none pause" scripts/results.sh      # these faults for every scenario
#   scripts/results.sh failover                 # only the failover section (see its block)
#   scripts/results.sh broker-kill              # only the broker-kill section (see its block)
#   ONLY=sweeps scripts/results.sh              # only the sweeps section, in place (see its block)
#   ONLY=scenarios SCENARIOS=events scripts/results.sh   # these scenarios' sections alone, in place
#   SWEEP_CLIENTS=1,4 SWEEP_KEYS=1,100 ONLY=sweeps DURATION=1s scripts/results.sh   # a quick try
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
duration=${DURATION:-10s}
# The cost runs (no faults) interleave the approaches round by round and report each ratio as
# the median of the rounds with its spread (`lockfree compare --rounds`): on a loaded machine
# one run's ratio moves by ±20%.
rounds=${ROUNDS:-3}
cost_duration=${COST_DURATION:-5s}
sweep_duration=${SWEEP_DURATION:-2s}
clients=${CLIENTS:-8}

# Services already in the environment (scripts/<service>.sh env) are used
# as they are; otherwise this clone's are started.
if [ -z "${TEST_FAULT_DATABASE_URL:-}" ]; then
	scripts/postgres.sh up
	eval "$(scripts/postgres.sh env)"
fi
kafka=${TEST_KAFKA_BROKERS:-}
if [ -z "$kafka" ] && scripts/kafka.sh up; then
	eval "$(scripts/kafka.sh env)"
	kafka=$TEST_KAFKA_BROKERS
fi
out=docs/results.md

# sync_pages rewrites the package pages' copies of results.md's figures
# (cmd/lockfree/internal/docsync), so that no page quotes a figure results.md no longer has.
sync_pages() {
	go test -count=1 -run '^TestPagesQuoteResults$' ./cmd/lockfree/internal/docsync -args -update >&2
}

# splice LEVEL NEW: replaces, in docs/results.md, each section of NEW (headings of LEVEL, "##" or
# "###") with the new one, up to the next heading of that level or above or a generated block's
# marker; a section results.md does not have yet goes after the last replaced one of its group
# (the words before " — ": its scenario), or, for a scenario results.md has no section of yet, after
# the scenarios' sections (before "## Coming from Redis" or the first generated block).
splice() { # LEVEL NEW [BEGIN END: only between these marker lines]
	local level=$1 new=$2 begin=${3:-} end=${4:-} spliced
	spliced=$(mktemp)
	awk -v f="$new" -v lv="$level " -v b="$begin" -v e="$end" '
		function group(h) { sub(/ — .*/, "", h); return h }
		function flush(g,   i) {
			for (i = 1; i <= n; i++) if (!(order[i] in used) && (g == "" || group(order[i]) == g)) { printf "%s", text[order[i]]; used[order[i]] = 1 }
		}
		BEGIN {
			while ((getline l < f) > 0) {
				if (index(l, lv) == 1) { h = l; order[++n] = h }
				if (h != "") text[h] = text[h] l "\n"
			}
		}
		b != "" && $0 == b { inside = 1 }
		b != "" && $0 == e { inside = 0 }
		b != "" && !inside { if (cur != "") flush(cur); cur = ""; skip = 0; print; next }
		{ heading = index($0, lv) == 1 || /^## / || /^# / || /^<!-- / }
		# Leaving a group (a scenario): its new sections go after its last.
		heading && cur != "" && (index($0, lv) != 1 || group($0) != cur) { flush(cur); cur = "" }
		# Past the scenarios: the sections of a scenario new to results.md.
		b == "" && lv == "## " && !past && (/^## Coming from Redis/ || /^<!-- /) { flush(""); past = 1 }
		heading { skip = 0 }
		index($0, lv) == 1 { cur = group($0) }
		index($0, lv) == 1 && ($0 in text) { printf "%s", text[$0]; used[$0] = 1; skip = 1; next }
		!skip { print }
		END {
			if (cur != "") flush(cur)
			for (i = 1; i <= n; i++) if (!(order[i] in used)) { print "results.sh: no place for \"" order[i] "\": run the full regeneration" > "/dev/stderr"; exit 1 }
		}' "$out" >"$spliced" || { rm -f "$spliced"; return 1; }
	mv "$spliced" "$out"
}

# replace_section NAME FILE: replaces, in results.md, the section between "<!-- NAME:" and
# "<!-- /NAME -->" with FILE's text, or appends it when results.md has none yet.
replace_section() {
	local tmp
	tmp=$(mktemp)
	if grep -q "^<!-- $1:" "$out"; then
		awk -v f="$2" -v b="<!-- $1:" -v e="<!-- /$1 -->" 'index($0, b) == 1 {while ((getline l < f) > 0) print l; skip = 1; next}
			$0 == e {skip = 0; next} !skip' "$out" >"$tmp"
	else
		{ cat "$out"; echo; cat "$2"; } >"$tmp"
	fi
	mv "$tmp" "$out"
}

# mutants prints the section of the mutant hunt, between markers that
# ONLY=mutants finds it by; it sets failed when the hunt failed.
mutants() {
	local table status=0
	table=$(mktemp)
	echo "results.sh: the mutant hunt (go test -tags lockfree_mutants -run TestMutants ./cmd/lockfree/internal/engine)" >&2
	go test -count=1 -timeout 60m -tags lockfree_mutants -run '^TestMutants$' ./cmd/lockfree/internal/engine \
		-args -mutants-table "$table" -mutants-rate "${MUTANTS_RATE:-5}" -mutants-random "${MUTANTS_RANDOM:-3}" >&2 || status=$?
	echo "<!-- mutants: generated by scripts/results.sh; ONLY=mutants scripts/results.sh regenerates this section alone -->"
	echo "## Mutants: each safety condition removed on purpose"
	echo
	echo "\`make mutants MUTANTS_RATE=${MUTANTS_RATE:-5} MUTANTS_RANDOM=${MUTANTS_RANDOM:-3}\` (\`go test -tags lockfree_mutants -run '^TestMutants\$' ./cmd/lockfree/internal/engine -args -mutants-table FILE -mutants-rate ${MUTANTS_RATE:-5} -mutants-random ${MUTANTS_RANDOM:-3}\`), $(date -u +%Y-%m-%d)."
	echo "One test binary has every mutant site of internal/failpoint's registry compiled in; each run turns one"
	echo "mutant on in its workers (\`LOCKFREE_MUTANTS\`) and runs a scenario's approach that reaches the site."
	echo "Violations are the scenario's check's, or the exclusivity check's of every run (overlapping tenures,"
	echo "revived leases, calls after a tenure lapsed, releases of a superseded tenure, tokens that went back). Each row is the run that caught it, or the last one tried"
	echo "(how it works: [compare.md](compare.md#mutants-can-the-proof-fail))."
	echo "\"site hits\" is how often the workers reached the mutant's site in it. A HOLE is a mutant no run catches:"
	echo "the proof does not yet show that its condition matters. A row whose scenario reads \"package test …\" was caught"
	echo "by that package test, not by a scenario: its site is out of every process fault's reach (a memory backend's,"
	echo "or a race inside one statement), as the note under the table says."
	if [ "$status" -ne 0 ]; then
		echo
		echo "**The hunt failed (exit $status): a mutant is not caught, or caught in fewer than all its runs, and not listed as a known hole or unsteady; or a run could not be made.**"
	fi
	echo
	cat "$table"
	echo "<!-- /mutants -->"
	rm -f "$table"
	[ "$status" -eq 0 ] || failed=1
}

if [ "${ONLY:-}" = mutants ]; then
	failed=0
	section=$(mktemp)
	mutants >"$section"
	replace_section mutants "$section"
	rm -f "$section"
	echo "results.sh: wrote the mutant section of $out" >&2
	sync_pages
	exit $failed
fi

bin=$(mktemp -d)/lockfree
go build -o "$bin" ./cmd/lockfree
list=$("$bin" compare --list)
known=$(awk '$1 == "scenario" {printf "%s ", $2}' <<<"$list")
scenarios=${SCENARIOS:-$known}

# --- the soak (ONLY=soak, make soak) ------------------------------------------------------------
# `ONLY=soak scripts/results.sh` runs every scenario (default approaches, the fenced twins and raw
# among them) under seeded random fault schedules, pass after pass with the next seed, for SOAK
# (1h), each run SOAK_RUN (10s); its totals replace the soak section of results.md. It needs Kafka
# for events and orders, and Redis for redis-lock: without them those are skipped, and say so.
if [ "${ONLY:-}" = soak ]; then
	failed=0
	soak=${SOAK:-1h} soak_run=${SOAK_RUN:-10s} soak_seed=${SOAK_SEED:-1}
	if scripts/redis.sh up; then eval "$(scripts/redis.sh env)"; fi
	cmd="lockfree compare --scenario all --faults random --seed $soak_seed --duration $soak_run --soak $soak --shrink alternative,fenced-lock"
	echo "results.sh: $cmd" >&2
	totals=$(mktemp)
	status=0
	"$bin" compare --scenario all --faults random --seed "$soak_seed" --duration "$soak_run" --soak "$soak" --shrink alternative,fenced-lock \
		--postgres "$TEST_FAULT_DATABASE_URL" ${kafka:+--kafka "$kafka"} ${TEST_REDIS_ADDR:+--redis "$TEST_REDIS_ADDR"} >"$totals" || status=$?
	section=$(mktemp)
	{
		echo "<!-- soak: generated by scripts/results.sh; ONLY=soak scripts/results.sh regenerates this section alone -->"
		echo "## Soak: random fault schedules for an hour"
		echo
		echo "\`$cmd\` (\`make soak\`), $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown),"
		echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at its end. Each pass runs every scenario's default approaches"
		echo "under a schedule drawn from its seed; the next pass takes the next seed. \`--seed N --scenario S\` replays a run."
		echo "A stall is a key that waited past its bound (longest wait); the longest gap with no operation completing counts the faults' own time."
		if [ "$status" -ne 0 ]; then
			echo
			echo "**The soak exited $status: a fault did not take effect somewhere, or a run could not be made.**"
			failed=1
		fi
		echo
		awk '/^Soak: / {on = 1} on' "$totals"
		echo "<!-- /soak -->"
	} >"$section"
	replace_section soak "$section"
	rm -f "$section" "$totals"
	echo "results.sh: wrote the soak section of $out" >&2
	exit $failed
fi

# faults_of prints the faults a scenario's sections are made under: none (the cost), then, in the
# registry's order, each fault a stale holder's write lands under ("bites") on every scenario it
# applies to, each fault the scenario's "shows" line names, and each other fault on the first
# scenario it applies to — so every fault shows at least once, on a scenario whose approaches it
# takes effect in. A fault that bites the whole run at once (failover) and broker-kill (it needs a
# cluster) have a section of their own;
# random, which plays the others, has none yet.
faults_of() { # scenario
	awk -v sc="$1" '
		$1 == "fault" { order[++n] = $2; for (i = 3; i <= NF; i++) trait[$2, $i] = 1 }
		$1 == "shows" && $2 == sc { for (i = 3; i <= NF; i++) shown[$i] = 1 }
		$1 == "applies" { for (i = 3; i <= NF; i++) { if (!($i in first)) first[$i] = $2; if ($2 == sc) here[$i] = 1 } }
		END {
			printf "none"
			for (i = 1; i <= n; i++) {
				f = order[i]
				if (!(f in here) || (trait[f, "bites"] && trait[f, "whole-run"]) || f == "random" || f == "broker-kill") continue
				if (trait[f, "bites"] || first[f] == sc || shown[f]) printf " %s", f
			}
			print ""
		}' <<<"$list"
}

mkdir -p docs/results
tmp=$(mktemp)
{
	echo "# Results"
	echo
	echo "Generated by \`scripts/results.sh\` on $(date -u +%Y-%m-%d), at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown): $clients worker processes; under a fault"
	echo "DURATION=$duration per approach; without faults (the cost) $rounds interleaved rounds of COST_DURATION=$cost_duration per approach, each"
	echo "ratio the median of the rounds with its spread (a ratio whose spread contains 1 is a tie);"
	echo "$(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(go version | cut -d' ' -f3),"
	echo "$(psql "$TEST_FAULT_DATABASE_URL" -tAc 'SHOW server_version' | cut -d' ' -f1) (local, fsync on)${kafka:+, Kafka $(grep -o 'KAFKA_VERSION:-[0-9.]*' scripts/kafka.sh | head -1 | cut -d- -f2)}."
	echo "Compare ratios within one table: every approach of a table ran in the same"
	echo "invocation, one after the other, on the same server. Absolute figures move"
	echo "with the machine's load. What each fault does, to whom, for how long and how"
	echo "it is counted, and what each column means: [compare.md](compare.md)."
	echo
} >"$tmp"

# --- failover (generated section of docs/results.md) ---------------------------------------
# `scripts/results.sh failover` runs only this block and replaces the failover section of
# docs/results.md; a full run appends it. `lockfree compare --faults failover` fails the lock
# service's database over (its own primary and standby, scripts/pg-replication.sh) on the
# scenarios whose leases live there; 2 workers: the stopped client and the taker
# (docs/compare.md#failover).
failover_scenarios=${FAILOVER_SCENARIOS:-$(awk '$1 == "applies" {for (i = 3; i <= NF; i++) if ($i == "failover") printf "%s ", $2}' <<<"$list")}
failover_begin='<!-- failover: generated by scripts/results.sh failover -->'
failover_end='<!-- end of failover -->'
failover_section() { # prints the section
	local sc md status cmd
	echo "$failover_begin"
	echo "## Failover"
	echo
	echo "Generated by \`scripts/results.sh failover\` (DURATION=$duration per approach, 2 worker processes) on $(date -u +%Y-%m-%d)."
	echo "The lock service's primary is killed while its standby is held from WAL, a client holding a lease whose"
	echo "WAL was lost stopped at its write; the standby is promoted. plain-token-lock is the fenced lock with"
	echo "its tokens minted by a plain \`nextval\` (no fence era): the foil. What the fault does: [compare.md](compare.md#failover)."
	for sc in $failover_scenarios; do
		cmd="lockfree compare --scenario $sc --approaches alternative,fenced-lock,naive-lock,plain-token-lock --clients 2 --duration $duration --faults failover"
		echo "results.sh: $cmd" >&2
		md=$(mktemp)
		status=0
		"$bin" compare --scenario "$sc" --approaches alternative,fenced-lock,naive-lock,plain-token-lock --clients 2 \
			--duration "$duration" --faults failover --postgres "${TEST_DATABASE_URL:-$TEST_FAULT_DATABASE_URL}" --markdown "$md" >/dev/null || status=$?
		echo
		echo "### $sc"
		echo
		echo "\`$cmd\`"
		if [ "$status" -ne 0 ]; then
			echo
			echo "**This run failed (exit $status): the failover did not take effect for some approach (no WAL lost, or the foil's tokens did not go back), so it proves nothing about that approach.**"
			failed=1
		fi
		echo
		sed '1,3d' "$md"
		rm -f "$md"
	done
	echo "$failover_end"
}
# replace_section BEGIN END NAME FUNCTION: runs FUNCTION and puts what it prints in place of
# docs/results.md's section between the marker lines BEGIN and END (at its end when it has none).
replace_section() {
	local section
	failed=0
	section=$(mktemp)
	"$4" >"$section"
	awk -v b="$1" -v e="$2" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' "$out" >"$tmp"
	cat "$section" >>"$tmp"
	rm -f "$section"
	mv "$tmp" "$out"
	echo "results.sh: wrote the $3 section of $out" >&2
}
if [ "${1:-}" = failover ]; then
	replace_section "$failover_begin" "$failover_end" failover failover_section
	sync_pages
	exit $failed
fi
# --- end of failover ------------------------------------------------------------------------

# --- broker kill (generated section of docs/results.md) ------------------------------------
# `scripts/results.sh broker-kill` runs only this block and replaces its section of
# docs/results.md; a full run appends it. `lockfree compare --faults broker-kill` on a cluster of
# three brokers (KAFKA_BROKERS=3 scripts/kafka.sh, started here and stopped after): the broker
# that leads the run's topic is killed mid-run and started again once another leads it.
brokerkill_begin='<!-- broker-kill: generated by scripts/results.sh broker-kill -->'
brokerkill_end='<!-- end of broker-kill -->'
brokerkill_section() { # prints the section
	local md status cmd cluster ctl
	KAFKA_BROKERS=3 scripts/kafka.sh up >&2
	cluster=$(KAFKA_BROKERS=3 scripts/kafka.sh env | sed -n 's/^export TEST_KAFKA_CLUSTER_BROKERS=//p')
	ctl="KAFKA_BROKERS=3 $PWD/scripts/kafka.sh"
	cmd="lockfree compare --scenario orders --clients 4 --duration $duration --faults broker-kill --kafka <3 brokers> --kafka-ctl 'KAFKA_BROKERS=3 scripts/kafka.sh'"
	echo "results.sh: $cmd" >&2
	md=$(mktemp)
	status=0
	"$bin" compare --scenario orders --clients 4 --duration "$duration" --faults broker-kill \
		--postgres "$TEST_FAULT_DATABASE_URL" --kafka "$cluster" --kafka-ctl "$ctl" --markdown "$md" >/dev/null || status=$?
	KAFKA_BROKERS=3 scripts/kafka.sh down >&2
	echo "$brokerkill_begin"
	echo "## Broker kill"
	echo
	echo "Generated by \`scripts/results.sh broker-kill\` (DURATION=$duration per approach, 4 worker processes) on $(date -u +%Y-%m-%d)."
	echo "The Kafka broker that leads the run's topic is killed (SIGKILL) a third into the run and started again once"
	echo "another broker leads its partition. \`copies-dropped\`: events the inboxes found applied by event ID. What the fault does: [compare.md](compare.md#faults)."
	echo
	echo "\`$cmd\`"
	if [ "$status" -ne 0 ]; then
		echo
		echo "**This run failed (exit $status): the kill did not take effect for some approach, so it proves nothing about that approach.**"
		failed=1
	fi
	echo
	sed '1,3d' "$md"
	rm -f "$md"
	echo "$brokerkill_end"
}
if [ "${1:-}" = broker-kill ]; then
	replace_section "$brokerkill_begin" "$brokerkill_end" broker-kill brokerkill_section
	exit $failed
fi
# --- end of broker kill ---------------------------------------------------------------------

# --- sweeps (generated section of docs/results.md) ------------------------------------------
# How cost grows with the work: for every scenario, `lockfree compare --clients LIST --keys
# LIST` without faults; per scenario the sweep's table (ops/s, p99, round trips per approach
# and point) and its line charts, ops/s and p99 against clients per key count and against keys
# per client count, cut out of the compare's HTML report into docs/img/sweep-SCENARIO-*.svg.
# `ONLY=sweeps scripts/results.sh` runs only this block and replaces the section in place; a
# full run includes it. Each point runs every approach for DURATION, so the default sweep (12
# points) takes about 12 × approaches × DURATION per scenario.
sweep_clients=${SWEEP_CLIENTS:-1,4,16,64}
sweep_keys=${SWEEP_KEYS:-1,100,10000}
sweeps_begin='<!-- sweeps: generated by scripts/results.sh; ONLY=sweeps scripts/results.sh regenerates this section alone -->'
sweeps_end='<!-- /sweeps -->'
sweep_charts() { # html scenario: writes the sweep's line charts, prints "file<TAB>title" per chart
	SWEEP_SC=$2 perl -0777 -ne '
		while (/(<svg class="line-chart".*?<\/svg>)/sg) {
			my $svg = $1;
			my ($title) = $svg =~ /<text[^>]*font-weight="bold"[^>]*>([^<]*)</;
			(my $slug = lc $title) =~ s/[^a-z0-9]+/-/g;
			$slug =~ s/^-|-$//g;
			my $file = "docs/img/sweep-$ENV{SWEEP_SC}-$slug.svg";
			open(my $fh, ">", $file) or die "$file: $!";
			print $fh qq{<?xml version="1.0" encoding="UTF-8"?>\n$svg\n};
			close $fh;
			print "$file\t$title\n";
		}' "$1"
}
sweeps_section() { # prints the section
	local sc md html status cmd file title
	echo "$sweeps_begin"
	echo "## Sweeps: how cost grows with clients and keys"
	echo
	echo "Generated by \`ONLY=sweeps scripts/results.sh\` (SWEEP_DURATION=$sweep_duration per approach and point, no faults) on $(date -u +%Y-%m-%d),"
	echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the start. Each point runs every approach of the scenario one after the"
	echo "other with that many worker processes over that many keys (1 key: one hot row). A dashed line is an approach whose check"
	echo "found violations at some point; \"failed\" in a table and an × on a chart mark a point at which an approach's run could not"
	echo "be made, its reason listed under the table. What the columns mean: [compare.md](compare.md)."
	for sc in $scenarios; do
		cmd="lockfree compare --scenario $sc --clients $sweep_clients --keys $sweep_keys --duration $sweep_duration --faults none"
		echo "results.sh: $cmd" >&2
		md=$(mktemp)
		html=$(mktemp)
		status=0
		"$bin" compare --scenario "$sc" --clients "$sweep_clients" --keys "$sweep_keys" --duration "$sweep_duration" --faults none \
			--postgres "$TEST_FAULT_DATABASE_URL" ${kafka:+--kafka "$kafka"} --markdown "$md" --html "$html" >/dev/null || status=$?
		echo
		echo "### $sc"
		echo
		echo "\`$cmd\`"
		if [ "$status" -ne 0 ]; then
			echo
			echo "**This run failed (exit $status): its figures may be missing or partial.**"
			failed=1
		fi
		echo
		# The sweep's table: from its heading to the blank line after the table,
		# then the list of the points that failed, if any.
		awk '/^### .*: sweep over / {on = 1; next} on && /^\|/ {print; seen = 1; next}
			seen && /^- failed: / {if (!listed) print ""; listed = 1; print; next}
			seen && /^$/ && !gap {gap = 1; next} seen {exit}' "$md"
		echo
		sweep_charts "$html" "$sc" | while IFS=$'\t' read -r file title; do
			echo "![$sc: $title](${file#docs/})"
		done
		rm -f "$md" "$html"
	done
	echo "$sweeps_end"
}
# --- end of sweeps --------------------------------------------------------------------------

mkdir -p docs/img
if [ "${ONLY:-}" = sweeps ]; then
	failed=0
	section=$(mktemp)
	sweeps_section >"$section"
	if [ -n "${SCENARIOS:-}" ] && grep -qF "$sweeps_begin" "$out"; then
		# Only these scenarios' sweeps, each saying when it ran.
		sub=$(mktemp)
		awk '/^### / {on = 1} /^<!-- / {on = 0} on' "$section" | awk -v note="Regenerated alone (\`SCENARIOS=\"$SCENARIOS\" ONLY=sweeps scripts/results.sh\`) on $(date -u +%Y-%m-%d), at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), load average $(cut -d' ' -f1-3 /proc/loadavg) at its end." \
			'{print} /^### / {print ""; print note}' >"$sub"
		splice "###" "$sub" "$sweeps_begin" "$sweeps_end"
		rm -f "$sub" "$section"
		sync_pages
		echo "results.sh: replaced the sweeps of $SCENARIOS in $out" >&2
		exit $failed
	elif grep -qF "$sweeps_begin" "$out"; then
		awk -v b="$sweeps_begin" -v e="$sweeps_end" -v f="$section" \
			'$0 == b {while ((getline l < f) > 0) print l; skip = 1; next} $0 == e {skip = 0; next} !skip' "$out" >"$tmp"
	else
		{ cat "$out"; echo; cat "$section"; } >"$tmp"
	fi
	rm -f "$section"
	mv "$tmp" "$out"
	echo "results.sh: wrote the sweeps section of $out and docs/img/sweep-*.svg" >&2
	sync_pages
	exit $failed
fi

# notes prints, after a scenario's cost table, what each approach sends PostgreSQL per operation
# and why it cannot send less: the round trips/op column is counted by a pgx tracer on each
# worker's pool (cmd/lockfree/internal/engine/tracer.go), the hand counts — in roundtrips.md of
# the scenario's folder (`lockfree compare --list`: its package) — are checked against it by
# `go test -run TestRoundTripsPerOp ./cmd/lockfree/internal/engine`, `-run TestGroupConsumerApply`
# (the events naive and Redis twins' member) and the packages' own round-trip tests
# (idempotency's and kafkawriter's roundtrips_test.go). On one hot key the lock-based approaches'
# figure is mostly waiting: each failed acquire of the busy lock is one more round trip
# (fencedlock's polled Wait).
notes() { # scenario
	local file
	file=$(awk -v s="$1" '$1 == "package" && $2 == s {print $3}' <<<"$list")/roundtrips.md
	[ -f "$file" ] || return 0
	echo "**Round trips per operation.** What each approach sends PostgreSQL for one operation, uncontended, and what keeps it from sending fewer:"
	cat "$file"
	echo
}

failed=0
run() { # scenario faults [keys [what the key count makes of the run]]
	local sc=$1 faults=$2 keys=${3:-1} what=${4:-}
	case " $known" in *" $sc "*) ;; *)
		echo "results.sh: no scenario $sc in the registry, skipped" >&2
		return
		;;
	esac
	local chart="docs/results/$sc-${faults//,/+}.svg"
	[ "$keys" = 1 ] || chart="docs/results/$sc-${faults//,/+}-k$keys.svg"
	# The cost runs: interleaved rounds, each ratio a median with its spread.
	local d=$duration more=()
	if [ "$faults" = none ]; then
		d=$cost_duration
		more=(--rounds "$rounds")
	fi
	local cmd="lockfree compare --scenario $sc --clients $clients --keys $keys --duration $d${more[*]:+ ${more[*]}} --faults $faults"
	echo "results.sh: $cmd" >&2
	local md status=0
	md=$(mktemp)
	"$bin" compare --scenario "$sc" --clients "$clients" --keys "$keys" --duration "$d" "${more[@]}" --faults "$faults" \
		--postgres "$TEST_FAULT_DATABASE_URL" --restart-cmd "$TEST_FAULT_POSTGRES_CTL restart" \
		${kafka:+--kafka "$kafka"} --markdown "$md" --chart "$chart" >/dev/null || status=$?
	{
		echo "## $sc — faults: $faults, $keys key(s)${what:+ ($what)}"
		echo
		echo "\`$cmd\` — chart: [$(basename "$chart")](results/$(basename "$chart"))"
		if [ "$status" -ne 0 ]; then
			echo
			echo "**This run failed (exit $status): a requested fault did not take effect for some approach, so it proves nothing about that fault.**"
		fi
		echo
		if [ "${ONLY:-}" = scenarios ]; then
			echo
			echo "Regenerated alone (\`ONLY=scenarios SCENARIOS=$sc FAULTS=$faults scripts/results.sh\`) on $(date -u +%Y-%m-%d), at commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), load average $(cut -d' ' -f1-3 /proc/loadavg) at its end."
		fi
		echo
		sed '1,3d' "$md"
		echo
	} >>"$tmp"
	rm -f "$md"
	[ "$status" -eq 0 ] || failed=1
}
[ "${ONLY:-}" != scenarios ] || : >"$tmp"

for sc in $scenarios; do
	faults=${FAULTS:-$(faults_of "$sc")}
	for f in $faults; do
		costs=$(awk -v s="$sc" '$1 == "cost" && $2 == s' <<<"$list")
		if [ "$f" = none ] && [ -n "$costs" ]; then
			# The scenario's own cost runs (engine.Coster), each named for what
			# its key count makes of the run.
			while read -r _ _ keys what; do
				run "$sc" none "$keys" "$what"
			done <<<"$costs"
			notes "$sc" >>"$tmp"
			continue
		fi
		run "$sc" "$f"
		[ "$f" != none ] || notes "$sc" >>"$tmp"
	done
done
if [ "${ONLY:-}" = scenarios ]; then
	# Each new section replaces the one of the same heading; a new one goes
	# after its scenario's last.
	splice "##" "$tmp"
	rm -f "$tmp"
	sync_pages
	echo "results.sh: replaced the sections of $scenarios in $out" >&2
	exit $failed
fi
# Coming from Redis: every approach, the Redis locks included, on one key
# with and without pause, and what one lock costs (TestRedisFigures).
if scripts/redis.sh up; then
	eval "$(scripts/redis.sh env)"
	figures=docs/results/redis.md
	echo "results.sh: the Redis figures ($figures)" >&2
	go test -count=1 -timeout 60m -run '^TestRedisFigures$' ./cmd/lockfree/internal/engine \
		-args -redis-figures "$root/$figures" -redis-duration "$duration" >&2
	{
		echo "## Coming from Redis"
		echo
		echo "\`go test -run '^TestRedisFigures\$' ./cmd/lockfree/internal/engine -args -redis-figures $figures -redis-duration $duration\`"
		echo "(8 workers, 1 key; $(redis-server --version | cut -d' ' -f1-3) on loopback). What it means: [decision guide](decision-guide.md#coming-from-redis)."
		echo
		cat "$figures"
	} >>"$tmp"
fi
{
	echo
	sweeps_section
	echo
	failover_section
	echo
	brokerkill_section
	mutants
	# The soak (an hour: ONLY=soak) is not run again; its last section stays.
	if grep -q '^<!-- soak:' "$out"; then
		echo
		awk '/^<!-- soak:/ {on = 1} on {print} /^<!-- \/soak -->/ {on = 0}' "$out"
	fi
} >>"$tmp"
mv "$tmp" "$out"
sync_pages
echo "results.sh: wrote $out, docs/results/*.svg and docs/img/sweep-*.svg" >&2
exit $failed
