package comparefailover_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/replpair"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// Test 4 of docs/failover.md, through the harness (`lockfree compare
// --faults failover`, short): the lock service's primary is killed with
// leases whose WAL its held standby never received, and the standby
// promoted, while a client holding one of them is stopped at its write.
// The fenced lock, its tokens minted in fence eras, and the alternative
// lose nothing; the naive lock and the foil — the same fenced lock, its
// tokens a plain nextval — let the stopped client's write through, in every
// run. The run fails (engine.ErrNotInjected) when no WAL was lost or when
// the foil's tokens did not go back (the foil then runs again, foilTries in
// all), and the test when the lock service's own check (history.Ascending)
// missed the foil's token going back.
//
// The foil bites only when the taker is granted the stopped client's very
// token on the stopped client's row: the stopped client's fenced read
// stamped the row with it, and refuses any lower one. The harness makes
// that so: the stopped client holds a token above what the sequence had
// WAL-logged when the standby was held, and above the values the taker's
// operation in flight can be granted on the promoted node once resumed, so
// the promoted node hands it out again; the taker runs alone, one
// operation at a time, its next one sent to the stopped client's key, and
// when it begins it the coordinator draws the promoted node's sequence up
// to just below that token, as other locks' leases would. It runs
// documents, where every operation writes the one register it locks, and
// inventory, whose victim is stopped at a reprice. On singleton it runs the
// leaders: a leader elected after the standby was held is stopped with its
// term, and the taker is elected on the promoted node — the fenced leader
// loses nothing, the naive one closes a period twice.
func TestCompareFailover(t *testing.T) {
	pair := replpair.Get(t).Shared()
	all := []engine.Approach{engine.Alternative, engine.FencedLock, engine.NaiveLock, engine.PlainTokenLock}
	for _, name := range []string{"documents", "inventory"} {
		t.Run(name, func(t *testing.T) { compareFailover(t, pair, name, all) })
	}
	t.Run("singleton", func(t *testing.T) {
		compareFailover(t, pair, "singleton", []engine.Approach{engine.Alternative, engine.NaiveLock})
	})
}

// compareFailover runs scenario name's approaches under the failover fault
// and checks what every run must show: each approach checked with its
// failover injected, no violation for the alternative and the fenced lock,
// and one at least for the naive lock and the foil.
func compareFailover(t *testing.T, pair *replpair.Pair, name string, approaches []engine.Approach) {
	sc, _ := engine.Lookup(name)
	run := func(approaches []engine.Approach) (report.Report, error) {
		rep, err := engine.Run(context.Background(), sc, engine.Config{
			Clients: 2, Keys: 1, Duration: 10 * time.Second, Faults: []engine.Fault{engine.Failover},
			Approaches: approaches,
		}, engine.Infra{URL: testdb.URL(t), Failover: pair})
		for _, n := range rep.Notes {
			t.Log(n)
		}
		return rep, err
	}
	rep, err := run(approaches)
	for try := 2; errors.Is(err, engine.ErrNotInjected) && onlyFoilMissed(rep) && try <= foilTries; try++ {
		t.Logf("the foil's tokens did not go back as far as its taker's write (see its note): its run again, %d of %d", try, foilTries)
		var again report.Report
		again, err = run([]engine.Approach{engine.PlainTokenLock})
		if len(again.Results) == 1 {
			i := slices.IndexFunc(rep.Results, func(r report.Result) bool { return r.Approach == engine.PlainTokenLock })
			rep.Results[i] = again.Results[0]
		}
	}
	if err != nil {
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
		case r.FaultsInjected[engine.Failover] == 0:
			t.Errorf("%s: failover not injected", r.Approach)
		case r.Approach == engine.Alternative || r.Approach == engine.FencedLock:
			if r.Violations != 0 || r.Ops == 0 {
				t.Errorf("%s: %d violations, %d operations; want none and some", r.Approach, r.Violations, r.Ops)
			}
		case r.Violations == 0:
			t.Errorf("%s: no violation across the failover: the fault did not bite, or the check missed it", r.Approach)
		case r.Approach == engine.PlainTokenLock && !strings.Contains(r.Detail, string(history.Regressed)):
			// The taker was granted the stopped client's token again:
			// the lock service's own check sees it, not only the data's.
			t.Errorf("%s: no %q among its violations: %s", r.Approach, history.Regressed, r.Detail)
		}
	}
	if len(rep.Results) != len(approaches) {
		t.Errorf("%d results, want %d", len(rep.Results), len(approaches))
	}
}

// foilTries bounds the runs of the foil in one test. Its fault bites only
// when the taker is granted the stopped client's very token; a lease the
// taker is granted elsewhere between the coordinator's draw of the
// sequence and its write spends that token, and the run is not counted
// (engine.ErrNotInjected, its note listing the taker's grants). The one
// way seen so far, a directed operation that failed on a connection the
// killed primary left and a next one sent elsewhere, is closed
// (command.Stay, 10 of 10 runs on a loaded machine): a second run is the
// net for one not seen yet, its check unchanged.
const foilTries = 2

// onlyFoilMissed reports whether the foil is the one approach of rep whose
// failover took effect not once.
func onlyFoilMissed(rep report.Report) bool {
	foil := false
	for _, r := range rep.Results {
		missed := r.Skipped == "" && r.Failed == "" && r.FaultsInjected[engine.Failover] == 0
		switch {
		case missed && r.Approach == engine.PlainTokenLock:
			foil = true
		case missed || r.Failed != "":
			return false
		}
	}
	return foil
}
