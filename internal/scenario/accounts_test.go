package scenario_test

import (
	"context"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/scenario"
)

// Under pauses past the lease, every entity's sequence stays gapless and
// duplicate-free with the partitioned single writer and with the fenced
// lock; the naive lock appends duplicates, which proves the pauses bit and
// the checker sees them. On PostgreSQL and in memory.
func TestAccountsPauseFault(t *testing.T) {
	backends := testBackends(t)
	sc, ok := scenario.Lookup("accounts")
	if !ok {
		t.Fatal("no scenario accounts")
	}
	for backend, url := range backends {
		t.Run(backend, func(t *testing.T) {
			rep, err := scenario.Run(context.Background(), sc, scenario.Config{
				Clients: 8, Keys: 1, Duration: 2 * time.Second, Faults: []scenario.Fault{scenario.Pause},
			}, scenario.Infra{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[scenario.Approach]bool{}
			for _, r := range rep.Results {
				seen[r.Approach] = true
				t.Logf("%-12s ops=%d retries=%d rejected=%d errors=%d uncertain=%d pauses=%d violations=%d %s",
					r.Approach, r.Ops, r.Retries, r.Rejected, r.Errors, r.Uncertain, r.Pauses, r.Violations, r.Detail)
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
						t.Errorf("%s: no operation succeeded", r.Approach)
					}
				}
				// No partition moves and no write is uncertain here: the
				// serial executor alone keeps the sequence, so the
				// alternative's conditional write never has to refuse one.
				if r.Approach == scenario.Alternative && r.Rejected != 0 {
					t.Errorf("alternative: %d appends rejected without a partition move", r.Rejected)
				}
			}
			for _, a := range []scenario.Approach{scenario.Alternative, scenario.FencedLock, scenario.NaiveLock} {
				if !seen[a] {
					t.Errorf("%s did not run", a)
				}
			}
		})
	}
}

// Without faults every approach appends gaplessly, over many entities.
func TestAccountsNoFault(t *testing.T) {
	backends := testBackends(t)
	sc, _ := scenario.Lookup("accounts")
	for backend, url := range backends {
		t.Run(backend, func(t *testing.T) {
			rep, err := scenario.Run(context.Background(), sc, scenario.Config{
				Clients: 8, Keys: 50, Duration: time.Second,
			}, scenario.Infra{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep.Results {
				t.Logf("%-12s ops=%d retries=%d rejected=%d errors=%d violations=%d %s",
					r.Approach, r.Ops, r.Retries, r.Rejected, r.Errors, r.Violations, r.Detail)
				if r.Violations != 0 {
					t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
				}
				if r.Ops == 0 {
					t.Errorf("%s: no operation succeeded", r.Approach)
				}
			}
		})
	}
}
