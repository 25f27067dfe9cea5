package scenario_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/scenario"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
)

// eventsInfras lists where the events scenario runs: the memory backend
// (actor group; twins on an in-memory queue with fencedlock.Gate), always;
// PostgreSQL without Kafka (actor group and in-process competing consumers
// applying into PostgreSQL) and PostgreSQL with Kafka (kafkawriter.Consumer,
// FencedConsumer, the bare reader) when the services are configured, or
// CI=true.
func eventsInfras(t *testing.T) map[string]scenario.Infra {
	infras := map[string]scenario.Infra{"memory": {}}
	ci := os.Getenv("CI") == "true"
	if os.Getenv("TEST_DATABASE_URL") != "" || ci {
		url := testdb.URL(t)
		infras["postgres"] = scenario.Infra{URL: url}
		if os.Getenv(testkafka.EnvBrokers) != "" || ci {
			infras["postgres+kafka"] = scenario.Infra{URL: url, Kafka: testkafka.Brokers(t)}
		}
	}
	return infras
}

// Under pauses past the lease inside the handler (between reading the
// entity's state and writing it), the single writer and the fenced lock apply
// every event exactly once and in order; the naive lock applies some twice —
// its lease expired during the pause, the competing consumer took the entity
// and applied the event, and the paused one wrote anyway — which proves the
// pauses bit and the checker sees it.
func TestEventsPauseFault(t *testing.T) {
	sc, ok := scenario.Lookup("events")
	if !ok {
		t.Fatal("no scenario events")
	}
	for name, infra := range eventsInfras(t) {
		t.Run(name, func(t *testing.T) {
			// With Kafka the twins see few pauses in 2s (each consumer handles
			// every event); give the naive lock's failure room to show.
			d := 2 * time.Second
			if len(infra.Kafka) > 0 {
				d = 5 * time.Second
			}
			rep, err := scenario.Run(context.Background(), sc, scenario.Config{
				Clients: 4, Keys: 4, Duration: d, Faults: []scenario.Fault{scenario.Pause},
			}, infra)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[scenario.Approach]bool{}
			for _, r := range rep.Results {
				seen[r.Approach] = true
				t.Logf("%-12s applied=%d (%.0f/s) submitted=%d rejected=%d errors=%d uncertain=%d pauses=%d violations=%d %s",
					r.Approach, r.Ops, r.OpsPerSec, r.Submitted, r.Rejected, r.Errors, r.Uncertain, r.Pauses, r.Violations, r.Detail)
				switch r.Approach {
				case scenario.NaiveLock:
					if r.Violations == 0 {
						t.Errorf("naive lock: no violation under pauses (%d pauses): the fault did not bite", r.Pauses)
					}
				case scenario.Alternative, scenario.FencedLock, scenario.Raw:
					if r.Violations != 0 {
						t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
					}
					if r.Ops == 0 {
						t.Errorf("%s: no event applied", r.Approach)
					}
				}
				if r.Approach != scenario.Raw && r.Pauses == 0 {
					t.Errorf("%s: no pause happened", r.Approach)
				}
			}
			for _, a := range []scenario.Approach{scenario.Alternative, scenario.FencedLock, scenario.NaiveLock} {
				if !seen[a] {
					t.Errorf("%s did not run", a)
				}
			}
			if name == "postgres+kafka" && !seen[scenario.Raw] {
				t.Error("the bare reader did not run with Kafka")
			}
		})
	}
}

// Without faults every approach applies every event exactly once, in order,
// over many entities, and the report counts events applied.
func TestEventsNoFault(t *testing.T) {
	sc, _ := scenario.Lookup("events")
	for name, infra := range eventsInfras(t) {
		t.Run(name, func(t *testing.T) {
			// No faults: a lease long enough that a slow run under a loaded
			// machine does not lose it. The twins do not renew (they model a
			// stalled process), so with the 250ms default a run of an entity's
			// events that takes longer does expire, and the naive lock then
			// applies events twice without any fault injected.
			rep, err := scenario.Run(context.Background(), sc, scenario.Config{
				Clients: 4, Keys: 50, Duration: time.Second, LeaseTTL: 5 * time.Second,
			}, infra)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Results {
				t.Logf("%-12s applied=%d (%.0f/s) submitted=%d errors=%d violations=%d %s",
					r.Approach, r.Ops, r.OpsPerSec, r.Submitted, r.Errors, r.Violations, r.Detail)
				if r.Violations != 0 {
					t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
				}
				if r.Ops == 0 || r.OpsPerSec <= 0 {
					t.Errorf("%s: no event applied", r.Approach)
				}
				// Drained: every acknowledged event was finished.
				if r.Ops != r.Submitted*20 && r.Submitted != 0 {
					t.Errorf("%s: %d events finished of %d operations × 20 events", r.Approach, r.Ops, r.Submitted)
				}
			}
		})
	}
}
