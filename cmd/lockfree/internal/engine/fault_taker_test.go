package engine_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// With many keys a pause finds no worker that picks the stopped one's key
// by chance (payments: 50 new keys a round, 8 clients, the pause at a first
// execution): the engine sends one there. So every pause of the naive
// lock is taken over and it charges twice in every run, the alternative's
// taker is kept out (the claim waits on the stopped transaction), and the
// verdict says which.
func TestPauseSendsTaker(t *testing.T) {
	t.Parallel() // a schema and workers of its own
	sc, _ := engine.Lookup("payments")
	cfg := engine.Config{Clients: 8, Keys: 50, Duration: 3 * time.Second, Faults: []engine.Fault{engine.Pause},
		Approaches: []engine.Approach{engine.Alternative, engine.NaiveLock}}
	rep := runLogged(t, sc, cfg, engine.Infra{URL: testdb.New(t).URL})
	for _, r := range rep.Results {
		logResult(t, r)
		n, taken := r.FaultsInjected[engine.Pause], r.TakenOver[engine.Pause]
		switch {
		case !r.Checked:
			t.Errorf("%s: not checked: %s", r.Approach, r.Detail)
		case n == 0:
			t.Errorf("%s: no pause counted", r.Approach)
		case r.Approach == engine.NaiveLock && (taken != n || r.Violations == 0):
			t.Errorf("naive-lock: %d of %d pauses taken over, %d violations; want every one, and some", taken, n, r.Violations)
		case r.Approach == engine.Alternative && (taken != 0 || r.Violations != 0):
			t.Errorf("alternative: %d of %d pauses taken over, %d violations; want none of either", taken, n, r.Violations)
		}
	}
	verdict := report.Judge(rep).Injected
	if !strings.Contains(verdict, "taken over: alternative 0 of ") {
		t.Errorf("the verdict does not say the alternative's pauses were not taken over: %s", verdict)
	}
}

// A naive twin writes on its operation's context, as its fenced twin does,
// and its stale write still lands: the time a worker spends stopped, or
// held as the taker, is not spent from its operation's deadline
// (opDeadline). With operations bounded by 1.2 s, every pause (the lease,
// 1 s, and its margin, 0.5 s) outlives the deadline it would otherwise
// end, and the naive lock must still lose data.
func TestStaleWriteOutlivesDeadline(t *testing.T) {
	t.Parallel() // each run: a schema and workers of its own
	for _, name := range []string{"inventory", "documents", "payments", "accounts"} {
		t.Run(name, func(t *testing.T) {
			sc, _ := engine.Lookup(name)
			cfg := engine.Config{Clients: 8, Keys: 1, Duration: 3 * time.Second, Faults: []engine.Fault{engine.Pause},
				Approaches: []engine.Approach{engine.NaiveLock}, LeaseTTL: time.Second, OpTimeout: 1200 * time.Millisecond}
			rep := runLogged(t, sc, cfg, engine.Infra{URL: testdb.New(t).URL})
			for _, r := range rep.Results {
				logResult(t, r)
				if r.Violations == 0 {
					t.Errorf("naive-lock: %d pauses (%d taken over), no violation", r.FaultsInjected[engine.Pause], r.TakenOver[engine.Pause])
				}
			}
		})
	}
}
