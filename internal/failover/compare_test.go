package failover_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/harness"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testrepl"
)

// Test 4 of docs/failover.md, through the harness (`lockfree compare
// --faults failover`, short): the lock service's primary is killed with
// leases whose WAL its held standby never received, and the standby
// promoted, while a client holding one of them is stopped at its write.
// The fenced lock, its tokens minted in fence eras, and the alternative
// lose nothing; the naive lock and the foil — the same fenced lock, its
// tokens a plain nextval — let the stopped client's write through. The run
// fails (harness.ErrNotInjected) when no WAL was lost or when the foil's
// tokens did not go back.
//
// The coordinator parks the client that took the key over once it has
// written, so that the stopped client's write is the next
// to reach the key — no later lease of the taker's can raise the fence
// first and refuse it. It runs documents, where every operation writes the
// one register it locks: in inventory's store, the taker's refused sales
// and its operations on other rows take leases without writing the
// victim's row, so its write can come with a token that has climbed past
// the stopped client's — the fault then does not bite, and the harness
// does not count it (about one run in three here: scripts/results.sh
// failover reports it per run). A foil whose fault did not bite (see
// foilRuns) is run again; the fenced lock and the alternative must show
// none in every run.
func TestCompareFailover(t *testing.T) {
	pair := testrepl.Get(t).Shared()
	approaches := []harness.Approach{harness.Alternative, harness.FencedLock, harness.NaiveLock, harness.PlainTokenLock}
	bitten := map[harness.Approach]bool{}
	for run := 1; run <= foilRuns; run++ {
		for _, r := range compareFailover(t, pair, approaches, run < foilRuns) {
			if r.Violations > 0 {
				bitten[r.Approach] = true
			}
		}
		approaches = []harness.Approach{harness.Alternative, harness.FencedLock}
		for _, a := range []harness.Approach{harness.NaiveLock, harness.PlainTokenLock} {
			if !bitten[a] {
				approaches = append(approaches, a)
			}
		}
		if len(approaches) == 2 {
			return
		}
		t.Logf("run %d: %v showed no violation yet", run, approaches[2:])
	}
	for _, a := range approaches[2:] {
		t.Errorf("%s: no violation across the failover in %d runs: the fault did not bite, or the check missed it", a, foilRuns)
	}
}

// foilRuns bounds how often TestCompareFailover runs a foil that has not
// shown its violation yet: the victim's plain token can fall within what
// the sequence had already logged ahead (32 values) when the standby was
// held, and the promoted node then hands out the next one — measured in
// about one documents run in ten; the harness does not count such a
// failover for the foil.
const foilRuns = 4

// compareFailover runs documents under the failover fault with approaches
// and checks what every run must show: each approach checked with its
// failover injected, and no violation for the alternative and the fenced
// lock.
func compareFailover(t *testing.T, pair *replpair.Pair, approaches []harness.Approach, retry bool) []report.Result {
	t.Helper()
	sc, _ := harness.Lookup("documents")
	rep, err := harness.Run(context.Background(), sc, harness.Config{
		Clients: 2, Keys: 1, Duration: 10 * time.Second, Faults: []harness.Fault{harness.Failover},
		Approaches: approaches,
	}, harness.Infra{URL: testdb.URL(t), Failover: pair})
	for _, n := range rep.Notes {
		t.Log(n)
	}
	if err != nil && !(retry && errors.Is(err, harness.ErrNotInjected)) {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		t.Logf("%-16s ops=%d rejected=%d errors=%d uncertain=%d faults=%v violations=%d %s",
			r.Approach, r.Ops, r.Rejected, r.Errors, r.Uncertain, r.FaultsInjected, r.Violations, r.Detail)
		switch {
		case r.Skipped != "":
			t.Errorf("%s skipped: %s", r.Approach, r.Skipped)
		case !r.Checked:
			t.Errorf("%s: not checked: %s", r.Approach, r.Detail)
		case r.FaultsInjected[harness.Failover] == 0:
			if !retry || r.Approach == harness.Alternative || r.Approach == harness.FencedLock {
				t.Errorf("%s: failover not injected", r.Approach)
			}
		case r.Approach == harness.Alternative || r.Approach == harness.FencedLock:
			if r.Violations != 0 || r.Ops == 0 {
				t.Errorf("%s: %d violations, %d operations; want none and some", r.Approach, r.Violations, r.Ops)
			}
		}
	}
	if len(rep.Results) != len(approaches) {
		t.Errorf("%d results, want %d", len(rep.Results), len(approaches))
	}
	return rep.Results
}
