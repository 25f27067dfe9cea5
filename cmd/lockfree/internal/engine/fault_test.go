package engine_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// faultTests lists, per scenario, the faults its test runs: every scenario
// under the faults a stale holder's write lands under (pause, delay) and
// under crash (each restart meets its own name's lease), every scenario
// with a lease of the lock service under lost-reply (its grants, renewals
// and releases lose their answers), the
// first scenario with an approach a fault can take effect in (FaultSkip)
// under the others too, to keep the suite within minutes, and the pairs of
// alsoByDefault, but none of onlyWithAll; LOCKFREE_FAULT_TESTS=all runs every scenario under every
// fault.
func faultTests() []struct {
	scenario string
	fault    engine.Fault
} {
	var out []struct {
		scenario string
		fault    engine.Fault
	}
	all := os.Getenv("LOCKFREE_FAULT_TESTS") == "all"
	first := map[engine.Fault]bool{} // the fault has its scenario
	for _, sc := range engine.Scenarios() {
		for _, f := range engine.FaultNames() {
			if f == engine.Failover {
				continue // it needs a replication pair: internal/failover's TestCompareFailover
			}
			if f == engine.BrokerKill {
				continue // it needs a cluster whose brokers it kills: comparecluster's TestCompareBrokerKill
			}
			if f == engine.Random {
				continue // it plays the others: TestRandom
			}
			if len(faultApproaches(sc.Name(), f)) == 0 || !all && onlyWithAll[sc.Name()] {
				continue
			}
			if all || !first[f] || engine.Bites(f) || f == engine.Crash || alsoByDefault[sc.Name()+"/"+string(f)] ||
				f == engine.LostReply && lockService(sc.Name()) {
				first[f] = true
				out = append(out, struct {
					scenario string
					fault    engine.Fault
				}{sc.Name(), f})
			}
		}
	}
	return out
}

// onlyWithAll are the scenarios the default set leaves out, each because a
// test of its own runs it under the faults that bite it, in less time.
var onlyWithAll = map[string]bool{
	// TestOrdersChain: lost-reply, pause, crash and overtake, its Kafka
	// runs each one after another, where the default set would add pause
	// and delay runs of every approach.
	"orders": true,
}

// alsoByDefault are the scenario/fault pairs the default set runs beyond
// the first scenario of their fault, each because it cuts what no other
// scenario's run under that fault does.
var alsoByDefault = map[string]bool{
	// A cut worker's Kafka connections are cut with its PostgreSQL ones:
	// its consumer's session runs out while its producer's request may be
	// in flight, whose lost answer must not write the events twice.
	"events/isolate": true,
	// Each commits transactions of its own, other than inventory's
	// baskets: a document's delete or create, an append with Verify.
	"documents/lost-commit": true,
	"accounts/lost-commit":  true,
	// Its alternative's leases are idempotency's, not the lock service's.
	"payments-leased/late-renewal": true,
}

// Under each fault, really injected (counted only once it took effect), the
// alternative and the fenced lock lose nothing, checked; under the faults a
// stale write lands under, the naive lock loses data, which proves the fault
// bit and the check can see it.
func TestFaults(t *testing.T) {
	// Its runs share go test's -parallel slots with the other tests whose
	// runs have schemas and workers of their own.
	t.Parallel()
	var kafka kafkaLanes
	for _, tc := range faultTests() {
		var others []engine.Approach
		for _, a := range faultApproaches(tc.scenario, tc.fault) {
			if kafkaUser(tc.scenario, a) && !engine.WholeRun(tc.fault) {
				kafka.add(tc.scenario, string(tc.fault)+"/"+string(a), func(t *testing.T) { runFault(t, tc.scenario, tc.fault, a) })
			} else {
				others = append(others, a)
			}
		}
		if len(others) == 0 {
			continue
		}
		t.Run(tc.scenario+"/"+string(tc.fault), func(t *testing.T) {
			if engine.WholeRun(tc.fault) {
				// A restart hits the one server every run of it shares:
				// its approaches run one after another, and alone.
				runFault(t, tc.scenario, tc.fault, others...)
				return
			}
			// Each approach's run has its schema, topic, Redis keys and
			// workers of its own: they run beside each other's (go test's
			// -parallel at a time), which cuts the suite's minutes, most
			// of them spent waiting out leases and durations.
			t.Parallel()
			for _, a := range others {
				t.Run(string(a), func(t *testing.T) {
					t.Parallel()
					runFault(t, tc.scenario, tc.fault, a)
				})
			}
		})
	}
	kafka.run(t)
}

// kafkaLanes are the runs of Kafka approaches, per scenario. Consumer
// groups settle slowly on a loaded machine: one Kafka run goes at a time
// (kafkaRuns), beside another kind. A scenario's Kafka runs go one after
// another in one parallel subtest, its lane, named after the scenario (so
// a run keeps its name, scenario/fault/approach): as parallel subtests of
// their own, those waiting for kafkaRuns would hold -parallel's slots.
type kafkaLanes struct {
	scenarios []string
	runs      map[string][]kafkaRun
}

type kafkaRun struct {
	name string
	run  func(*testing.T)
}

// add queues run, named name, in scenario's lane.
func (l *kafkaLanes) add(scenario, name string, run func(*testing.T)) {
	if l.runs == nil {
		l.runs = map[string][]kafkaRun{}
	}
	if _, ok := l.runs[scenario]; !ok {
		l.scenarios = append(l.scenarios, scenario)
	}
	l.runs[scenario] = append(l.runs[scenario], kafkaRun{name, run})
}

// run starts each lane as a parallel subtest of t.
func (l *kafkaLanes) run(t *testing.T) {
	for _, sc := range l.scenarios {
		t.Run(sc, func(t *testing.T) {
			t.Parallel()
			for _, r := range l.runs[sc] {
				t.Run(r.name, func(t *testing.T) {
					kafkaRuns.Lock()
					defer kafkaRuns.Unlock()
					r.run(t)
				})
			}
		})
	}
}

// lockService reports whether an approach of scenario holds leases of the
// engine's lock service.
func lockService(scenario string) bool {
	return slices.ContainsFunc(engine.Approaches(scenario), func(d engine.ApproachDef) bool {
		return d.Protection(engine.Params{}).LockService
	})
}

// kafkaRuns lets one run of a Kafka approach go at a time.
var kafkaRuns sync.Mutex

// kafkaUser reports whether a's clients in scenario consume from Kafka.
func kafkaUser(scenario string, a engine.Approach) bool {
	for _, d := range engine.Approaches(scenario) {
		if _, ok := d.(engine.KafkaUser); ok && d.Approach() == a {
			return true
		}
	}
	return false
}

// runFault runs approaches of scenario under f and checks each result.
func runFault(t *testing.T, scenario string, f engine.Fault, approaches ...engine.Approach) {
	t.Helper()
	runFaultAt(t, scenario, f, "", approaches...)
}

// runFaultAt is runFault, f stopping its workers at at (Config.At).
func runFaultAt(t *testing.T, scenario string, f engine.Fault, at string, approaches ...engine.Approach) {
	t.Helper()
	sc, _ := engine.Lookup(scenario)
	infra := engine.Infra{}
	if f == engine.Restart {
		db := testdb.Faults(t)
		infra.URL = db.URL
		ctl := os.Getenv("TEST_FAULT_POSTGRES_CTL")
		infra.Restart = func(ctx context.Context) error {
			out, err := exec.CommandContext(ctx, "bash", "-c", ctl+" restart").CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
			}
			return nil
		}
	} else {
		infra.URL = testdb.New(t).URL
	}
	infra.Redis = redisAddr(t)
	infra.Kafka = kafkaBrokers(t)
	cfg := engine.Config{
		Clients: 8, Keys: 1, Duration: 3 * time.Second, Faults: []engine.Fault{f},
		Approaches: approaches, At: at,
	}
	// Room for a fault past the longest lease, and its takeover:
	// a Kafka consumer's session and rebalance take seconds.
	cfg.Duration = max(cfg.Duration, 3*longestLease(scenario, cfg))
	rep := runLogged(t, sc, cfg, infra)
	// A scenario whose alternative resends with operation IDs has the
	// lost-reply fault's foil, which resends without them.
	resends := slices.ContainsFunc(engine.Approaches(scenario), func(d engine.ApproachDef) bool { return d.Approach() == engine.BlindRetry })
	for _, r := range rep.Results {
		logResult(t, r)
		checkResult(t, f, at, r, resends)
	}
}

// runLogged runs sc, logs the run's notes and fails t if the run failed.
func runLogged(t *testing.T, sc engine.Scenario, cfg engine.Config, infra engine.Infra) report.Report {
	t.Helper()
	rep, err := engine.Run(context.Background(), sc, cfg, infra)
	for _, n := range rep.Notes {
		t.Log(n)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func logResult(t *testing.T, r report.Result) {
	t.Helper()
	t.Logf("%-12s ops=%d rejected=%d errors=%d uncertain=%d faults=%v counts=%v violations=%d %s",
		r.Approach, r.Ops, r.Rejected, r.Errors, r.Uncertain, r.FaultsInjected, r.Extra, r.Violations, r.Detail)
}

// faultApproaches are the approaches of scenario that TestFaults runs under
// f: those f can take effect in, the foils (naive, Redis) only under a
// fault that bites, the only one whose outcome on them the test checks,
// or, for the naive lock, under lost-reply, whose lock service it shares,
// the coalesced sales under lost-reply (a lost step is uncertain for each
// of its callers), and the foil of f (Foil).
func faultApproaches(scenario string, f engine.Fault) []engine.Approach {
	var out []engine.Approach
	checked := []engine.Approach{engine.Alternative, engine.VerifiedAlternative, engine.FencedLock, engine.VerifiedLock}
	switch {
	case engine.Bites(f):
		checked = append(checked, engine.NaiveLock, engine.RedisLock, engine.RedsyncLock)
	case f == engine.LostReply:
		checked = append(checked, engine.NaiveLock, engine.Coalesced)
	}
	for _, a := range checked {
		for _, d := range engine.Approaches(scenario) {
			if d.Approach() == a && engine.FaultSkip(f, d) == "" {
				out = append(out, a)
			}
		}
	}
	for _, d := range engine.Approaches(scenario) {
		if foil, ok := d.(engine.Foil); ok && engine.FaultSkip(f, d) == "" {
			if of, _ := foil.FoilOf(); of == f {
				out = append(out, d.Approach())
			}
		}
	}
	return out
}

// longestLease is the longest lease that protects an approach of scenario
// that cfg runs.
func longestLease(scenario string, cfg engine.Config) time.Duration {
	var d time.Duration
	for _, a := range engine.Approaches(scenario) {
		if slices.Contains(cfg.Approaches, a.Approach()) {
			d = max(d, a.Protection(engine.Params{Sizes: engine.Sizes{Keys: cfg.Keys, Clients: cfg.Clients}, LeaseTTL: 250 * time.Millisecond}).Lease)
		}
	}
	return d
}

// kafkaBrokers returns the brokers of TEST_KAFKA_BROKERS, or none, when
// the approaches that need Kafka are reported as skipped; with CI=true a
// missing broker fails the test instead.
func kafkaBrokers(t *testing.T) []string {
	t.Helper()
	v := os.Getenv("TEST_KAFKA_BROKERS")
	if v == "" && os.Getenv("CI") == "true" {
		t.Fatal("TEST_KAFKA_BROKERS is not set and CI=true: run scripts/kafka.sh up and eval \"$(scripts/kafka.sh env)\"")
	}
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// skipped handles a result the harness skipped: a failure under CI=true,
// where every approach must run, a note otherwise.
func skipped(t *testing.T, r report.Result) {
	t.Helper()
	if strings.Contains(r.Skipped, "Redis") {
		skippedRedis(t, r)
		return
	}
	if os.Getenv("CI") == "true" {
		t.Errorf("%s skipped under CI=true: %s", r.Approach, r.Skipped)
		return
	}
	t.Logf("%s skipped: %s (set TEST_KAFKA_BROKERS: eval \"$(scripts/kafka.sh env)\")", r.Approach, r.Skipped)
}

// checkResult holds r to what the approach must show under f, stopping its
// workers at at; resends: the scenario's alternative resends an operation
// whose answer was lost with its operation ID, and must know every outcome.
func checkResult(t *testing.T, f engine.Fault, at string, r report.Result, resends bool) {
	t.Helper()
	if r.Skipped != "" {
		skipped(t, r)
		return
	}
	if r.FaultsInjected[f] == 0 {
		t.Errorf("%s: %s not injected", r.Approach, f)
	}
	if n := r.FaultsInjected[engine.CrashRestartFailed]; n > 0 {
		t.Errorf("%s: %d of %d crashed workers not restarted", r.Approach, n, r.FaultsInjected[engine.Crash])
	}
	if !r.Checked {
		t.Errorf("%s: not checked: %s", r.Approach, r.Detail)
		return
	}
	// Whatever the approach does with its answers, the lock service
	// keeps its rules, and its evidence counts only what is certain.
	if f == engine.LostReply {
		if n := lockViolations(r.Detail); n != "" {
			t.Errorf("%s: the lock service broke its rules under %d × %s: %s", r.Approach, r.FaultsInjected[f], f, n)
		}
	}
	switch r.Approach {
	case engine.Alternative, engine.Coalesced, engine.VerifiedAlternative, engine.FencedLock, engine.VerifiedLock:
		if r.Violations != 0 {
			t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
		}
		// A mechanism that counts the stale writers it refused refused
		// one after each pause: a stopped writer was taken over. One
		// stopped in its transaction after its fenced write holds the
		// row: the taker waits for its COMMIT, and none is refused.
		if n, ok := r.Extra["fenced"]; ok && (f == engine.Pause && at != engine.AtInTx || f == engine.Overtake) && n == 0 {
			t.Errorf("%s: no transaction refused by a fence under %d × %s: no stopped writer was taken over", r.Approach, r.FaultsInjected[f], f)
		}
		// An overtaken consumer tried its batch again and found it
		// applied by the one that overtook it.
		if n, ok := r.Extra["skipped"]; ok && f == engine.Overtake && n == 0 {
			t.Errorf("%s: no event found applied under %d × %s: no stopped consumer's batch was skipped", r.Approach, r.FaultsInjected[f], f)
		}
		if r.Ops == 0 {
			t.Errorf("%s: no operation succeeded", r.Approach)
		}
		// Its operations sent without an ID (counted as plain-uncertain
		// when their answer was lost) are the only uncertain ones.
		if f == engine.LostReply && resends && r.Approach == engine.Alternative && (float64(r.Uncertain) != r.Extra["plain-uncertain"] || r.Retries == 0) {
			t.Errorf("%s: %d uncertain operations (%d sent once without an ID), %d resends under %d × %s; want only those uncertain, each other lost answer resent",
				r.Approach, r.Uncertain, int(r.Extra["plain-uncertain"]), r.Retries, r.FaultsInjected[f], f)
		}
	case engine.BlindRetry:
		if r.Violations == 0 {
			t.Errorf("%s: no violation under %d × %s: no resent operation applied twice, or the check missed it", r.Approach, r.FaultsInjected[f], f)
		}
	case engine.NaiveLock, engine.RedisLock, engine.RedsyncLock:
		if engine.Bites(f) && r.Violations == 0 {
			t.Errorf("%s: no violation under %d × %s: the fault did not bite, or the check missed it", r.Approach, r.FaultsInjected[f], f)
		}
		if engine.Bites(f) {
			checkTimeline(t, r.Timeline)
		}
	}
}

// lockViolations returns the counts of the lock service's own anomalies in
// a result's detail ("3 overlapping tenures, 1 revived lease; first: …"),
// "" for none.
func lockViolations(detail string) string {
	counts, _, _ := strings.Cut(detail, "; first: ")
	var out []string
	for _, part := range strings.Split(counts, ", ") {
		for _, a := range []history.Anomaly{history.Overlap, history.Revived, history.Regressed} {
			if strings.HasSuffix(part, " "+string(a)) {
				out = append(out, part)
			}
		}
	}
	return strings.Join(out, ", ")
}

// checkTimeline checks that a run whose check found violations draws them,
// each referring to a write that is drawn too, and the faults before them.
func checkTimeline(t *testing.T, tl *report.Timeline) {
	t.Helper()
	if tl == nil {
		t.Error("no timeline")
		return
	}
	ids := map[string]bool{}
	var violations []report.Mark
	faults := 0
	for _, l := range tl.Lanes {
		for _, m := range l.Marks {
			ids[m.ID] = true
			if m.Kind == report.MarkViolation {
				violations = append(violations, m)
			}
		}
		for _, s := range l.Spans {
			if s.Kind == report.SpanPause || s.Kind == report.SpanIsolate {
				faults++
			}
		}
	}
	if len(violations) == 0 || faults == 0 {
		t.Errorf("timeline: %d violation marks, %d fault spans; want some of each", len(violations), faults)
	}
	for _, v := range violations {
		if v.Ref != "" && !ids[v.Ref] {
			t.Errorf("timeline: violation %s refers to %s, which is not drawn", v.ID, v.Ref)
		}
	}
}
