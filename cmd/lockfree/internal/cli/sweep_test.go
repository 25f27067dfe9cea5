package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// startupScenario exists in this test binary only: its alternative cannot
// start with more than one client, its raw approach always can. The workers
// are this binary re-executed, so they see it too.
type startupScenario struct{}

func (startupScenario) Name() string                    { return "startup" }
func (startupScenario) Order() int                      { return 1000 }
func (startupScenario) Description() string             { return "workers that start, or not" }
func (startupScenario) OnRequest() string               { return "a test's own" }
func (startupScenario) Migrations() []migrate.Migration { return nil }
func (startupScenario) Setup(context.Context, *pgxpool.Pool, engine.Sizes) error {
	return nil
}
func (startupScenario) Check(context.Context, *pgxpool.Pool, []history.Op, engine.Sizes) (*history.Findings, error) {
	return &history.Findings{Checker: "none"}, nil
}

// startupApproach is one approach of startupScenario; failsFrom is the
// number of clients from which its clients cannot start (0: never).
type startupApproach struct {
	approach  engine.Approach
	failsFrom int
}

func (a startupApproach) Scenario() string          { return "startup" }
func (a startupApproach) Approach() engine.Approach { return a.approach }
func (a startupApproach) Label() string             { return "a client that does nothing" }
func (a startupApproach) Protection(engine.Params) engine.Protection {
	return engine.Protection{}
}
func (a startupApproach) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	if a.failsFrom > 0 && env.Clients >= a.failsFrom {
		return nil, errors.New("cannot start beside another client")
	}
	return idleClient{}, nil
}

type idleClient struct{}

func (idleClient) Op(ctx context.Context) error {
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Millisecond):
	}
	return nil
}
func (idleClient) Close() error { return nil }

func init() {
	engine.Register(startupScenario{})
	engine.RegisterApproach(startupApproach{approach: engine.Alternative, failsFrom: 2})
	engine.RegisterApproach(startupApproach{approach: engine.Raw})
}

// TestCompareSweepGoesOnPastAFailedPoint: an approach whose workers cannot
// start at one point of a sweep is reported as failed there, with why —
// in the JSON without figures, in the tables and charts as a gap — while
// the other approach runs at that point and the sweep goes on to the next;
// the exit status says that something failed.
func TestCompareSweepGoesOnPastAFailedPoint(t *testing.T) {
	db := testdb.New(t)
	html := filepath.Join(t.TempDir(), "report.html")
	md := filepath.Join(t.TempDir(), "report.md")
	args := []string{"compare", "--postgres", db.URL, "--scenario", "startup", "--approaches", "alternative,raw",
		"--clients", "1,2,3", "--duration", "200ms", "--faults", "none"}

	code, out, errs := run(t, append(args, "--json", "--html", html, "--markdown", md)...)
	if code != 1 || !strings.Contains(errs, "startup/alternative") || !strings.Contains(errs, "cannot start beside another client") {
		t.Fatalf("exit %d, want 1 with the failed approach named: %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d JSON lines, want one per point (3): the sweep goes on past a failed point\n%s", len(lines), out)
	}
	for i, l := range lines {
		var rep struct {
			Clients int
			Results []map[string]any
		}
		if err := json.Unmarshal([]byte(l), &rep); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		if rep.Clients != i+1 || len(rep.Results) != 2 {
			t.Fatalf("point %d: %d clients, %d results: %s", i, rep.Clients, len(rep.Results), l)
		}
		alt, raw := rep.Results[0], rep.Results[1]
		failed, _ := alt["failed"].(string)
		switch {
		case i == 0 && failed != "":
			t.Errorf("1 client: alternative failed: %s", failed)
		case i > 0 && !strings.Contains(failed, "cannot start beside another client"):
			t.Errorf("%d clients: alternative's failed = %q, want why", i+1, failed)
		case i > 0 && alt["ops_per_sec"] != nil:
			t.Errorf("%d clients: a failed result carries figures, which would read as zeros: %v", i+1, alt)
		}
		if raw["failed"] != nil || raw["checked"] != true {
			t.Errorf("%d clients: raw did not run beside the failed alternative: %v", i+1, raw)
		}
	}

	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 2 | 1 | failed | | |", "- failed: alternative at 2 clients, 1 key: "} {
		if !strings.Contains(string(b), want) {
			t.Errorf("Markdown report lacks %q:\n%s", want, b)
		}
	}
	if b, err = os.ReadFile(html); err != nil || !strings.Contains(string(b), "alternative failed at 2</title>") {
		t.Errorf("HTML report's sweep chart does not mark the failed point: %v", err)
	}

	code, out, _ = run(t, args...)
	text := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{"failed: alternative at 3 clients, 1 key: ", "alternative failed at 2 of 3 points", "alternative failed in startup."} {
		if code != 1 || !strings.Contains(text, want) {
			t.Errorf("text output, exit %d: want %q (the sweep's failures under its table, in its verdict and the glance's sentence):\n%s", code, want, out)
		}
	}
}
