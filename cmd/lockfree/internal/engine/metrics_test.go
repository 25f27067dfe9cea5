package engine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// total sums the series of metric name in ms whose attributes include attrs
// ("key=value" each).
func total(ms []report.Metric, name string, attrs ...string) float64 {
	var sum float64
	for _, m := range ms {
		if m.Name != name {
			continue
		}
		ok := true
		for _, a := range attrs {
			k, v, _ := strings.Cut(a, "=")
			ok = ok && m.Attrs[k] == v
		}
		if ok {
			sum += m.Value
		}
	}
	return sum
}

func describe(ms []report.Metric) string {
	var b strings.Builder
	report.WriteMetrics(&b, report.Report{Clients: 4, Results: []report.Result{{Approach: "run", Metrics: ms}}})
	return b.String()
}

// Under --metrics, a pause past the lease shows in the merged metrics the
// way an operator would see it in production: the fenced twin's stale
// holder is a counted fenced rejection, and the partition member that
// paused loses its partitions to handovers and its write is a counted stale
// epoch. Without a MeterProvider in its workers' clients the run would
// report none of it.
func TestPauseIsCountedInMetrics(t *testing.T) {
	t.Parallel() // a schema and workers of its own
	sc, _ := engine.Lookup("accounts")
	rep, err := engine.Run(context.Background(), sc, engine.Config{
		Clients: 4, Keys: 1, Duration: 2 * time.Second, Faults: []engine.Fault{engine.Pause},
		Approaches: []engine.Approach{engine.Alternative, engine.FencedLock}, Metrics: true,
	}, engine.Infra{URL: testdb.New(t).URL})
	for _, n := range rep.Notes {
		t.Log(n)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		t.Logf("%s: ops=%d rejected=%d faults=%v\n%s", r.Approach, r.Ops, r.Rejected, r.FaultsInjected, describe(r.Metrics))
		ms := r.Metrics
		switch r.Approach {
		case engine.FencedLock:
			if n := total(ms, "lockfree.fencedlock.fenced.rejections", "lockfree.lock.prefix=accounts/"); n < 1 {
				t.Errorf("fenced-lock: %v fenced rejections counted after %d pauses, want ≥ 1", n, r.FaultsInjected[engine.Pause])
			}
			if n := total(ms, "lockfree.fencedlock.acquire.duration"); n != 0 {
				t.Errorf("a histogram's value is %v, want 0 (its count says how many)", n)
			}
		case engine.Alternative:
			if n := total(ms, "lockfree.partition.stale_epochs"); n < 1 {
				t.Errorf("alternative: %v stale epochs counted after %d pauses, want ≥ 1", n, r.FaultsInjected[engine.Pause])
			}
			// On resume a paused member stops its partitions for its lost
			// lease, or for their new owners, whichever it sees first: its
			// keepalive and its reconcile race.
			lost := total(ms, "lockfree.partition.stops", "lockfree.cause=lease_lost")
			if n := lost + total(ms, "lockfree.partition.stops", "lockfree.cause=superseded"); n < 1 {
				t.Errorf("alternative: no partition stopped for a lost lease or a new owner after %d pauses", r.FaultsInjected[engine.Pause])
			}
			if n := total(ms, "lockfree.partition.handovers"); n < 1 {
				t.Errorf("alternative: no handover counted")
			}
		}
	}
}
