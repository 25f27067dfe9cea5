package cli_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
)

// huntSeed is the random hunt's seed in make test: one schedule per
// scenario and approach, the same in every run of the test.
const huntSeed = "11"

// TestRandomHunt is make test's bounded random hunt: every scenario under
// a random schedule drawn from huntSeed. The alternative and the fenced
// lock must show no violation (one would be shrunk, and printed with its
// replay); the naive lock must show some, in some scenario, or the
// schedules did not bite.
func TestRandomHunt(t *testing.T) {
	db := testdb.New(t)
	brokers := strings.Join(testkafka.Brokers(t), ",")
	// The lab's scenarios, not those this test binary registers.
	var names []string
	for _, sc := range engine.Scenarios() {
		if strings.Contains(reflect.TypeOf(sc).PkgPath(), "/internal/scenario/") {
			names = append(names, sc.Name())
		}
	}
	// Each scenario's hunt on its own, two at a time (go test's -parallel):
	// a schedule depends on the seed, the scenario and the approach alone.
	var mu sync.Mutex
	var naive int64
	scenarios := map[string]bool{}
	t.Run("scenario", func(t *testing.T) {
		for _, name := range names {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				reps := hunt(t, db.URL, brokers, name)
				mu.Lock()
				defer mu.Unlock()
				for _, rep := range reps {
					scenarios[rep.Scenario] = true
					for _, r := range rep.Results {
						if r.Approach == engine.NaiveLock {
							naive += r.Violations
						}
					}
				}
			})
		}
	})
	if len(scenarios) != len(names) || len(names) < 8 {
		t.Errorf("reports of %d scenarios, want the %d of %v", len(scenarios), len(names), names)
	}
	if naive == 0 {
		t.Errorf("the naive lock showed no violation in any scenario under seed %s: the schedules did not bite", huntSeed)
	}
}

// hunt runs scenario's random hunt and fails t on a violation of the
// alternative or the fenced lock, or one not checked; it returns the
// reports.
func hunt(t *testing.T, url, brokers, scenario string) []report.Report {
	code, out, errs := run(t, "compare", "--postgres", url, "--kafka", brokers, "--scenario", scenario,
		"--approaches", "alternative,fenced-lock,naive-lock", "--clients", "6", "--duration", "3s",
		"--faults", "random", "--seed", huntSeed, "--shrink", "alternative,fenced-lock", "--json")
	// A schedule none of whose injections took effect in some run (a
	// loaded machine) exits 1 and is no failure: the naive lock's
	// violations (TestRandomHunt) show that the schedules bit.
	t.Logf("exit %d:\n%s", code, errs)
	var reps []report.Report
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var rep report.Report
		if err := json.Unmarshal([]byte(line), &rep); err != nil {
			t.Fatalf("not a JSON report: %v\n%s", err, line)
		}
		reps = append(reps, rep)
		for _, r := range rep.Results {
			t.Logf("%s/%s: %d violations, %d ops; %s", rep.Scenario, r.Approach, r.Violations, r.Ops, r.ScheduleText())
			switch {
			case r.Approach == engine.NaiveLock:
			case !r.Checked:
				t.Errorf("%s/%s: not checked: %s%s", rep.Scenario, r.Approach, r.Skipped, r.Failed)
			case r.Violations > 0:
				t.Errorf("%s/%s: %d violations under seed %s: %s; %s", rep.Scenario, r.Approach, r.Violations, huntSeed, r.Detail, rep.ShrunkText(r))
			}
		}
	}
	return reps
}
