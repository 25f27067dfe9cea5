package scenario_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/scenario"
)

// Under pauses past the lease (in payments-replay, whose operations all
// repeat the round's few payments, so that a paused execution is taken
// over), the naive lock charges some payments twice
// while transactional idempotency and the fenced twin charge each exactly
// once — on PostgreSQL and in memory. The naive lock's double charges prove
// that the pause really happened and that the checker sees them; the fenced
// twin's rejections, that a stale holder did try to charge.
func TestPaymentsPause(t *testing.T) {
	backends := testBackends(t)
	sc, ok := scenario.Lookup("payments-replay")
	if !ok {
		t.Fatal("no scenario \"payments-replay\"")
	}
	for backend, url := range backends {
		t.Run(backend, func(t *testing.T) {
			rep, err := scenario.Run(context.Background(), sc, scenario.Config{
				Clients: 8, Keys: 4, Duration: 2 * time.Second, Faults: []scenario.Fault{scenario.Pause},
			}, scenario.Infra{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[scenario.Approach]bool{}
			for _, r := range rep.Results {
				seen[r.Approach] = true
				t.Logf("%-12s ops=%d rejected=%d errors=%d uncertain=%d pauses=%d violations=%d %s",
					r.Approach, r.Ops, r.Rejected, r.Errors, r.Uncertain, r.Pauses, r.Violations, r.Detail)
				if r.Pauses == 0 && r.Approach != scenario.Raw {
					t.Errorf("%s: no operation paused", r.Approach)
				}
				switch r.Approach {
				case scenario.NaiveLock:
					if r.Violations == 0 {
						t.Errorf("naive lock: no double charge under pauses (%d pauses): the fault did not bite", r.Pauses)
					}
				case scenario.FencedLock:
					if r.Violations != 0 {
						t.Errorf("fenced lock: %d violations: %s", r.Violations, r.Detail)
					}
					if r.Ops == 0 {
						t.Errorf("fenced lock: no operation succeeded")
					}
					if r.Rejected == 0 {
						t.Errorf("fenced lock: no stale holder was fenced (%d pauses): the fault did not bite", r.Pauses)
					}
				case scenario.Alternative, scenario.Raw:
					if r.Violations != 0 {
						t.Errorf("%s: %d violations: %s", r.Approach, r.Violations, r.Detail)
					}
					if r.Ops == 0 {
						t.Errorf("%s: no operation succeeded", r.Approach)
					}
				}
			}
			want := []scenario.Approach{scenario.Alternative, scenario.FencedLock, scenario.NaiveLock}
			if backend == "postgres" {
				want = append(want, scenario.Raw)
			}
			for _, a := range want {
				if !seen[a] {
					t.Errorf("%s did not run", a)
				}
			}
		})
	}
}

// The default payments run measures first executions: at least 8 in 10 of
// its operations charge, whatever the number of keys; payments-replay over
// a few keys measures replays: most of its operations answer without
// charging.
func TestPaymentsShares(t *testing.T) {
	backends := testBackends(t)
	share := regexp.MustCompile(`(\d+)% first executions \(\d+\), (\d+)% replays`)
	for _, c := range []struct {
		scenario             string
		keys                 int
		minFirsts, maxFirsts int
	}{{"payments", 1000, 80, 100}, {"payments", 4, 80, 100}, {"payments-replay", 4, 0, 50}} {
		sc, ok := scenario.Lookup(c.scenario)
		if !ok {
			t.Fatalf("no scenario %q", c.scenario)
		}
		for backend, url := range backends {
			t.Run(c.scenario+"/"+strconv.Itoa(c.keys)+"/"+backend, func(t *testing.T) {
				rep, err := scenario.Run(context.Background(), sc, scenario.Config{
					Clients: 4, Keys: c.keys, Duration: time.Second,
				}, scenario.Infra{URL: url})
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rep.Results {
					m := share.FindStringSubmatch(r.Detail)
					if m == nil {
						t.Errorf("%s: no shares in the detail %q", r.Approach, r.Detail)
						continue
					}
					firsts, _ := strconv.Atoi(m[1])
					if firsts < c.minFirsts || firsts > c.maxFirsts {
						t.Errorf("%s: %d%% first executions, want %d–%d%% (%s)", r.Approach, firsts, c.minFirsts, c.maxFirsts, r.Detail)
					}
				}
			})
		}
	}
}
