package plugintest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// hog is the liveness check's foil: an approach to the counter whose
// clients add under a transaction-scoped advisory lock of the key, and
// whose worker 0, from a second after its start, holds that lock through
// each add for hogHold — an executor held behind a slow request body —
// past the lease it declares and past any operation's deadline, while the
// others wait on the key. (A hold in the warm-up delays the measured part,
// which the next hold then covers.)
const (
	hog     engine.Approach = "hog"
	hogHold                 = 8 * time.Second

	sqlHogLock = `SELECT pg_advisory_xact_lock(hashtext($1))`
)

type counterHog struct{}

func init() { engine.RegisterApproach(counterHog{}) }

func (counterHog) Scenario() string          { return "counter" }
func (counterHog) Approach() engine.Approach { return hog }
func (counterHog) Label() string {
	return "BEGIN → advisory lock → UPDATE … RETURNING n → COMMIT, worker 0 holding the lock for 8 s at a time"
}
func (counterHog) Protection(p engine.Params) engine.Protection { return engine.LockTTL(p) }

func (counterHog) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	c := &hogClient{env: env}
	if env.Client == 0 {
		c.from = time.Now().Add(time.Second)
	}
	return c, nil
}

type hogClient struct {
	env  *engine.Env
	from time.Time // each add from then on holds the lock for hogHold; zero: none
}

func (c *hogClient) Op(ctx context.Context) error {
	ctx, op, err := c.env.Invoke(ctx, engine.Key("counter-", c.env.Rand.IntN(c.env.Keys)), kindAdd, nil)
	if err != nil {
		return err
	}
	hold := !c.from.IsZero() && time.Now().After(c.from)
	if hold {
		// The holder's work goes on past the operation's deadline, as a
		// handler reading a slow body does.
		ctx = context.WithoutCancel(ctx)
	}
	var n int64
	tx, err := c.env.DB.Begin(ctx)
	if err == nil {
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err = tx.Exec(ctx, sqlHogLock, op.Key()); err == nil {
			if hold {
				time.Sleep(hogHold)
			}
			if err = tx.QueryRow(ctx, sqlCounterAdd, op.Key()).Scan(&n); err == nil {
				err = tx.Commit(ctx)
			}
		}
	}
	return op.Finish(n, err)
}

func (c *hogClient) Close() error { return nil }

// A key held by a worker under no fault, past the lease its approach
// declares and an operation's time, is a stall: the run shows a violation
// that names the key and the wait, over the bound. The alternative, run
// alike, shows none (TestCounterScenarioPlugsIn holds it to 0 under pause).
func TestStallIsAViolation(t *testing.T) {
	sc, _ := engine.Lookup("counter")
	cfg := engine.Config{Clients: 3, Keys: 1, Duration: 6 * time.Second,
		Approaches: []engine.Approach{engine.Alternative, hog}}
	rep, err := engine.Run(context.Background(), sc, cfg, engine.Infra{URL: testdb.New(t).URL})
	if err != nil {
		t.Fatal(err)
	}
	byApproach := map[engine.Approach]report.Result{}
	for _, r := range rep.Results {
		t.Logf("%s: ops=%d violations=%d bound=%.0fms longest stall=%.0fms stalls=%v %s", r.Approach, r.Ops, r.Violations, r.StallBoundMs, r.LongestStallMs, r.Stalls, r.Detail)
		byApproach[r.Approach] = r
	}
	alt, h := byApproach[engine.Alternative], byApproach[hog]
	if !alt.Checked || alt.Violations != 0 || len(alt.Stalls) != 0 {
		t.Errorf("alternative: checked %v, %d violations, stalls %v: %s", alt.Checked, alt.Violations, alt.Stalls, alt.Detail)
	}
	if want := 250 + (2000 + 2*250) + 1000; h.StallBoundMs != float64(want) {
		t.Errorf("hog: bound %vms, want the lock TTL, the default operation timeout and a second, %dms", h.StallBoundMs, want)
	}
	var key *report.Stall
	for i := range h.Stalls {
		if h.Stalls[i].Key == "counter-0" {
			key = &h.Stalls[i]
		}
	}
	switch {
	case !h.Checked || h.Violations == 0 || key == nil:
		t.Fatalf("hog: checked %v, %d violations, stalls %v: no stall of counter-0: %s", h.Checked, h.Violations, h.Stalls, h.Detail)
	case key.Ms <= h.StallBoundMs || key.Ms > float64(hogHold.Milliseconds()):
		t.Errorf("hog: counter-0 waited %.0fms, want over the bound (%.0fms) and within the hold (%v)", key.Ms, h.StallBoundMs, hogHold)
	case !strings.Contains(h.Detail, "stall") || !strings.Contains(h.Detail, "key counter-0 waited"):
		t.Errorf("hog: the detail does not name the stall: %s", h.Detail)
	}
}
