package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// A paused operation goes on only once the coordinator has resumed its
// process: a worker's kill(SIGSTOP) of itself returns before the stop takes
// hold (another thread may take the signal), and an operation that went on
// meanwhile would write before the pause, or stop somewhere after its
// before-write point. The coordinator sends SIGCONT no sooner than the lease
// after the point, unless the run ended first: every pause it held for the
// lease ends in a resumption after it.
func TestPauseHoldsTheOperation(t *testing.T) {
	sc, _ := engine.Lookup("inventory")
	def := approachOf(t, "inventory", engine.NaiveLock)
	cfg := engine.Config{Clients: 4, Duration: 3 * time.Second, Faults: []engine.Fault{engine.Pause}}.WithDefaults()
	r, _, err := engine.RunApproach(context.Background(), sc, def, cfg, engine.Infra{URL: testdb.New(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	stops := r.HeldStops()
	for _, s := range stops {
		if s.Resumed != 0 && s.Resumed < s.At+history.Time(r.Lease()) {
			t.Errorf("worker %d's operation %s went on %v after its stop, before the coordinator resumed it (lease %v)",
				s.Client, s.Op, time.Duration(s.Resumed-s.At), r.Lease())
		}
	}
	if len(stops) == 0 {
		t.Fatal("no worker was stopped for the whole lease")
	}
}

// approachOf is scenario's approach a.
func approachOf(t *testing.T, scenario string, a engine.Approach) engine.ApproachDef {
	t.Helper()
	for _, d := range engine.Approaches(scenario) {
		if d.Approach() == a {
			return d
		}
	}
	t.Fatalf("no approach %s of scenario %s", a, scenario)
	return nil
}
