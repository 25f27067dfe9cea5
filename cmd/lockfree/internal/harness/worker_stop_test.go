package harness

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
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
	sc, _ := Lookup("inventory")
	def, _ := lookupApproach("inventory", NaiveLock)
	cfg := Config{Clients: 4, Duration: 3 * time.Second, Faults: []Fault{Pause}}.withDefaults()
	r, _, err := runApproach(context.Background(), sc, def, cfg, Infra{URL: testdb.New(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	r.mon.mu.Lock()
	defer r.mon.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	stops := 0
	for i, p := range r.mon.points {
		if p.ev.Ev != evPoint || p.ev.Mode != modeStop {
			continue
		}
		if !heldForLease(r, p) {
			continue // the run ended during the pause, and resumed it
		}
		stops++
		for _, q := range r.mon.points[i+1:] {
			if q.client == p.client && q.ev.Ev == evResumed && q.ev.Op == p.ev.Op {
				if q.ev.T < p.ev.T+history.Time(r.prot.Lease) {
					t.Errorf("worker %d's operation %s went on %v after its stop, before the coordinator resumed it (lease %v)",
						p.client, p.ev.Op, time.Duration(q.ev.T-p.ev.T), r.prot.Lease)
				}
				break
			}
		}
	}
	if stops == 0 {
		t.Fatal("no worker was stopped for the whole lease")
	}
}

// heldForLease reports whether the coordinator held the stop p for the whole
// lease before it resumed it: its pause span lasts that long.
func heldForLease(r *run, p pointSeen) bool {
	for _, s := range r.spans[p.client] {
		if s.Kind == report.SpanPause && s.Start == r.seconds(p.ev.T) {
			return s.End-s.Start >= r.prot.Lease.Seconds()
		}
	}
	return false
}
