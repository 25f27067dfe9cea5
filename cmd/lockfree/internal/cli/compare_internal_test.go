package cli

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// TestCompareDefaults: with no flags, compare injects real pauses into
// every approach of the scenarios not run on request only (events, which
// needs Kafka, is one), and --scenario all adds every registered one.
func TestCompareDefaults(t *testing.T) {
	f, err := parseCompare(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.faults, []engine.Fault{engine.Pause}) {
		t.Errorf("faults = %v, want pause", f.faults)
	}
	if !slices.Equal(f.names, []string{"inventory", "documents", "payments", "accounts", "singleton"}) {
		t.Errorf("scenarios = %v", f.names)
	}
	want := []engine.Approach{engine.Alternative, engine.FencedLock, engine.NaiveLock, engine.RedisLock, engine.Raw}
	if !slices.Equal(f.approaches, want) || !slices.Equal(f.clients, []int{6}) || f.rounds != 1 {
		t.Errorf("approaches %v, clients %v, rounds %d", f.approaches, f.clients, f.rounds)
	}
	all, err := parseCompare([]string{"--scenario", "all"}, io.Discard)
	if err != nil || !slices.Equal(all.names, engine.Names()) {
		t.Errorf("--scenario all = %v (%v), want %v", all.names, err, engine.Names())
	}
}

// --metrics is off by default and, given, shows in the command line the
// HTML report quotes.
func TestCompareMetricsFlag(t *testing.T) {
	f, err := parseCompare(nil, io.Discard)
	if err != nil || f.metrics || strings.Contains(f.command(), "--metrics") {
		t.Errorf("default: metrics %v, command %q (%v)", f.metrics, f.command(), err)
	}
	f, err = parseCompare([]string{"--metrics"}, io.Discard)
	if err != nil || !f.metrics || !strings.HasSuffix(f.command(), " --metrics") {
		t.Errorf("--metrics: metrics %v, command %q (%v)", f.metrics, f.command(), err)
	}
}

// Every service an approach declares it needs is one compare can be given
// (--redis, --etcd) or start: an approach needing another would only ever
// be reported skipped.
func TestCompareKnowsEveryService(t *testing.T) {
	for _, sc := range engine.Names() {
		for _, d := range engine.Approaches(sc) {
			if req, ok := d.(engine.Requirer); ok && !slices.Contains([]string{"redis", "etcd"}, req.Service()) {
				t.Errorf("%s/%s needs %q, which compare neither starts nor takes a flag for", sc, d.Approach(), req.Service())
			}
		}
	}
	if got := engine.ApproachesNeeding("etcd"); len(got) == 0 {
		t.Error("no approach needs etcd: the --etcd flag names none")
	}
}

// --seed shows in the command line the HTML report quotes, so that it
// replays the run's random schedules.
func TestCompareSeedFlag(t *testing.T) {
	f, err := parseCompare([]string{"--faults", "random", "--seed", "7"}, io.Discard)
	if err != nil || f.seed != 7 || !strings.HasSuffix(f.command(), "--faults random --rounds 1 --seed 7") {
		t.Errorf("seed %d, command %q, err %v", f.seed, f.command(), err)
	}
}

// The soak's totals count every run, checked or not, and name the seeds of
// the passes whose run showed violations.
func TestSoakTotals(t *testing.T) {
	tt := newSoakTotals()
	naive := func(v int64, checked bool) report.Report {
		return report.Report{Scenario: "inventory", Results: []report.Result{
			{Approach: engine.Alternative, Ops: 10, Checked: true, LongestStallMs: float64(v) * 100, LongestWaitMs: float64(v) * 90, StallBoundMs: 2750},
			{Approach: engine.NaiveLock, Ops: 7, Checked: checked, Violations: v, StallBoundMs: 2750, LongestWaitMs: 3000,
				Stalls: []report.Stall{{Key: "sku-0", Ms: 3000}}},
			{Approach: engine.RedisLock, Skipped: "no Redis"},
		}}
	}
	tt.add(naive(2, true), 3)
	tt.add(naive(0, true), 4)
	tt.add(naive(5, true), 5)
	tt.add(naive(9, false), 6)
	tt.passes, tt.last = 4, 6
	var b strings.Builder
	tt.write(&b, 3, time.Minute)
	for _, want := range []string{
		"Soak: 4 passes in 1m0s, seeds 3–6",
		"| inventory | alternative | 4 | 4 | 40 | 0 | 0 |  | 900ms | 810ms (2.75s) | 0 |",
		"| inventory | naive-lock | 4 | 3 | 28 | 7 | 3 | 3 5 | 0s | 3s (2.75s) | 0 |",
		"| inventory | redis-lock | 4 | 0 | 0 | 0 | 0 |  | 0s | 0s (0s) | 4 |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("totals lack %q:\n%s", want, b.String())
		}
	}
}
