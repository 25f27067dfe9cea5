package comparecluster_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
)

// The broker that leads the run's topic is killed mid-run (SIGKILL) and
// started again once another broker leads its partition: the relays'
// publishes in flight lose their answers and are sent again, the group
// rebalances. Every approach is checked with its kill made: the
// alternative and the fenced twin apply every accepted order exactly once,
// in order, the alternative's inboxes having dropped copies by event ID
// (the fault bit: events reached Kafka twice); raw, the same relay beside
// an inbox that dedupes by offset alone, applies copies.
func TestCompareBrokerKill(t *testing.T) {
	cluster := testkafka.NewCluster(t)
	for _, name := range []string{"orders"} {
		t.Run(name, func(t *testing.T) {
			sc, _ := engine.Lookup(name)
			rep, err := engine.Run(context.Background(), sc, engine.Config{
				Clients: 4, Keys: 1, Duration: 9 * time.Second, Faults: []engine.Fault{engine.BrokerKill},
				Approaches: []engine.Approach{engine.Alternative, engine.FencedLock, engine.Raw},
			}, engine.Infra{URL: testdb.URL(t), Kafka: cluster.Brokers, Brokers: engine.ShellBrokers(cluster.Ctl())})
			for _, n := range rep.Notes {
				t.Log(n)
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Results {
				t.Logf("%-12s ops=%d uncertain=%d faults=%v counts=%v violations=%d %s", r.Approach, r.Ops, r.Uncertain, r.FaultsInjected, r.Extra, r.Violations, r.Detail)
				if r.FaultsInjected[engine.BrokerKill] != 1 {
					t.Errorf("%s: broker kills %v, want 1 made", r.Approach, r.FaultsInjected)
				}
				switch {
				case r.Approach == engine.Alternative && r.Extra["copies-dropped"] == 0:
					t.Errorf("alternative: its inboxes dropped no copy: the kill made no relay publish an event again")
				case r.Approach == engine.Raw && r.Violations == 0:
					t.Errorf("raw: no violation under broker-kill: the relay's resent events were applied once by offset alone, or never resent")
				case r.Approach != engine.Raw && r.Violations != 0:
					t.Errorf("%s: %d violations under broker-kill: %s", r.Approach, r.Violations, r.Detail)
				}
			}
		})
	}
}

// A random schedule on a cluster it can kill brokers of (Config.KillBrokers)
// draws one broker-kill among the faults the approach admits, plays it at
// its time, and the alternative loses nothing.
func TestRandomKillsBroker(t *testing.T) {
	cluster := testkafka.NewCluster(t)
	sc, _ := engine.Lookup("orders")
	rep, err := engine.Run(context.Background(), sc, engine.Config{
		Clients: 4, Keys: 1, Duration: 12 * time.Second, Faults: []engine.Fault{engine.Random}, Seed: 3, KillBrokers: true,
		Approaches: []engine.Approach{engine.Alternative},
	}, engine.Infra{URL: testdb.URL(t), Kafka: cluster.Brokers, Brokers: engine.ShellBrokers(cluster.Ctl())})
	for _, n := range rep.Notes {
		t.Log(n)
	}
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results[0]
	t.Logf("schedule: %s; faults=%v counts=%v violations=%d %s", r.ScheduleText(), r.FaultsInjected, r.Extra, r.Violations, r.Detail)
	i := slices.IndexFunc(r.Schedule, func(in report.Injection) bool { return in.Fault == engine.BrokerKill })
	switch {
	case i < 0:
		t.Errorf("the schedule drew no broker-kill: %s", r.ScheduleText())
	case r.Schedule[i].Outcome == nil || !r.Schedule[i].Outcome.Effect || r.FaultsInjected[engine.BrokerKill] != 1:
		t.Errorf("the broker-kill was not made: %s, %v", r.ScheduleText(), r.FaultsInjected)
	}
	if r.Violations != 0 {
		t.Errorf("%d violations: %s", r.Violations, r.Detail)
	}
}
