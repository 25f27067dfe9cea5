package scenario_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/scenario"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// Under pauses past the lease, the naive lock loses writes while the
// alternative and the fenced lock lose none — on PostgreSQL and in memory.
// The naive lock's violations prove the pause really happened.
func TestPauseFault(t *testing.T) {
	backends := testBackends(t)
	for _, name := range []string{"inventory", "documents"} {
		for backend, url := range backends {
			t.Run(name+"/"+backend, func(t *testing.T) {
				sc, ok := scenario.Lookup(name)
				if !ok {
					t.Fatalf("no scenario %q", name)
				}
				rep, err := scenario.Run(context.Background(), sc, scenario.Config{
					Clients: 8, Keys: 1, Duration: 2 * time.Second, Faults: []scenario.Fault{scenario.Pause},
				}, scenario.Infra{URL: url})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rep.Results {
					t.Logf("%-12s ops=%d rejected=%d pauses=%d violations=%d %s", r.Approach, r.Ops, r.Rejected, r.Pauses, r.Violations, r.Detail)
					switch r.Approach {
					case scenario.NaiveLock:
						if r.Violations == 0 {
							t.Errorf("naive lock: no violation under pauses (%d pauses): the fault did not bite", r.Pauses)
						}
					case scenario.Alternative, scenario.FencedLock:
						if r.Violations != 0 {
							t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
						}
						if r.Ops == 0 {
							t.Errorf("%s: no operation succeeded", r.Approach)
						}
					}
				}
			})
		}
	}
}

// testBackends maps the backends a scenario test runs on to their database
// URLs: memory always, PostgreSQL when TEST_DATABASE_URL is set — and under
// CI=true, where testdb.URL fails the test if it is not.
func testBackends(t *testing.T) map[string]string {
	t.Helper()
	backends := map[string]string{"memory": ""}
	if os.Getenv("TEST_DATABASE_URL") != "" || os.Getenv("CI") == "true" {
		backends["postgres"] = testdb.URL(t)
	}
	return backends
}
