package engine_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// inTxTests are the runs of TestFaultsInTx: pause in every scenario with
// an approach that has an in-transaction point, stall in accounts (whose
// members a pause cannot count: inTxApproaches), and the other faults that
// stop a worker at a point in documents, whose alternative needs no lease.
func inTxTests() []struct {
	scenario string
	fault    engine.Fault
} {
	var out []struct {
		scenario string
		fault    engine.Fault
	}
	for _, sc := range engine.Scenarios() {
		for _, f := range engine.FaultNames() {
			also := sc.Name() == "documents" || sc.Name() == "accounts" && f == engine.Stall
			if !engine.PointArmed(f) || f != engine.Pause && !also || len(inTxApproaches(sc.Name(), f)) == 0 {
				continue
			}
			out = append(out, struct {
				scenario string
				fault    engine.Fault
			}{sc.Name(), f})
		}
	}
	return out
}

// inTxApproaches are the approaches of scenario TestFaultsInTx runs under
// f at their in-transaction points: those TestFaults runs (faultApproaches)
// that have one. A worker stopped after Verify — a partition member's or
// the verified lock's — holds Verify's share lock, which keeps every claim
// of its partition, or acquire of its lock, waiting until it resumes: the
// harness resumes it once it sees the taker wait on that lock (a real
// limit of verifying in the write's transaction, which only the server's
// idle_in_transaction_session_timeout bounds). Of the lease locks, the
// naive lock alone is the foil: the Redis locks' stale write in a stopped
// transaction is the same, and TestFaults shows them failing.
func inTxApproaches(scenario string, f engine.Fault) []engine.Approach {
	var out []engine.Approach
	for _, a := range faultApproaches(scenario, f) {
		if a == engine.RedisLock || a == engine.RedsyncLock {
			continue
		}
		for _, d := range engine.Approaches(scenario) {
			if _, tx := d.(engine.Transactor); tx && d.Approach() == a {
				out = append(out, a)
			}
		}
	}
	return out
}

// Stopped inside a transaction of its own (engine.AtInTx), each approach
// with such a point loses nothing, checked, and counts the fault; where a
// stale write lands (pause), the naive lock stopped in its transaction
// before its writes (events) loses data: the fault bit there too.
func TestFaultsInTx(t *testing.T) {
	t.Parallel()
	var kafka kafkaLanes
	for _, tc := range inTxTests() {
		var others []engine.Approach
		for _, a := range inTxApproaches(tc.scenario, tc.fault) {
			if kafkaUser(tc.scenario, a) {
				kafka.add(tc.scenario, string(tc.fault)+"/"+string(a), func(t *testing.T) { runFaultAt(t, tc.scenario, tc.fault, engine.AtInTx, a) })
			} else {
				others = append(others, a)
			}
		}
		if len(others) == 0 {
			continue
		}
		t.Run(tc.scenario+"/"+string(tc.fault), func(t *testing.T) {
			t.Parallel()
			for _, a := range others {
				t.Run(string(a), func(t *testing.T) {
					t.Parallel()
					runFaultAt(t, tc.scenario, tc.fault, engine.AtInTx, a)
				})
			}
		})
	}
	kafka.run(t)
}

// An Aimer's aim points are registered failpoints, or points of the
// harness ("harness." names) that its scenario's sources pass.
func TestAimPointsAreRegistered(t *testing.T) {
	t.Parallel()
	var sources strings.Builder
	err := filepath.WalkDir("../scenario", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		sources.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	passed := func(p string) bool {
		return strings.HasPrefix(p, "harness.") && strings.Contains(sources.String(), `"`+p+`"`)
	}
	for _, sc := range engine.Scenarios() {
		for _, d := range engine.Approaches(sc.Name()) {
			a, ok := d.(engine.Aimer)
			if !ok {
				continue
			}
			aimed := 0
			for _, f := range engine.FaultNames() {
				p := a.AimPoint(f)
				if p == "" {
					continue
				}
				aimed++
				if !passed(p) && !slices.ContainsFunc(failpoint.Registered(), func(r failpoint.Point) bool { return r.Name == p && r.Kind == failpoint.InjectPoint }) {
					t.Errorf("%s/%s: aim point %s of %s is no registered failpoint", sc.Name(), d.Approach(), p, f)
				}
			}
			if aimed == 0 {
				t.Errorf("%s/%s is an Aimer that aims no fault", sc.Name(), d.Approach())
			}
		}
	}
}
