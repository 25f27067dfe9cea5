package comparecluster_test

import (
	"context"
	"testing"
	"time"

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
