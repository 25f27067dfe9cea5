package lockfreetest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

// Fault is a fault a run injects into the workers.
type Fault = engine.Fault

// The faults a Test may ask for. Those that stop a worker stop it at the
// first lockfreetest.Point its operation reaches once the fault is armed.
const (
	// Pause stops the worker's process (SIGSTOP) at a Point, waits past
	// Test.Lease, sends another worker to the key, waits until that one
	// has served it (or is held at its own Point), and lets the first go
	// on: a GC pause, a swap, a VM migration.
	Pause = engine.Pause
	// Stall blocks the operation at a Point the same way, the rest of the
	// process running.
	Stall = engine.Stall
	// Isolate holds every byte between the worker and PostgreSQL from a
	// Point on, past the lease and the taker, then resets the connections.
	Isolate = engine.Isolate
	// Delay holds them the same way, then delivers them late.
	Delay = engine.Delay
	// Crash kills the worker (SIGKILL) at a Point and starts another in
	// its place: its operation in flight is of unknown outcome.
	Crash = engine.Crash
	// LostReply lets the worker's next statement reach the server and act,
	// and loses its answer: the connection is reset before it arrives.
	LostReply = engine.LostReply
	// Random draws a seeded schedule of the faults above, several
	// overlapping (Test.Seed replays it); it goes alone.
	Random = engine.Random
)

// Test is the code under test and the run that checks it. Op and one of
// Check and Model are required; the rest has defaults.
type Test[I, O any] struct {
	// Name names the code under test in the report. Defaults to "code".
	Name string
	// URL is the PostgreSQL server to run on; each run gets a fresh schema
	// of its own (the workers' search_path), dropped after. Defaults to
	// $LOCKFREE_TEST_DATABASE_URL, then $TEST_DATABASE_URL, then a
	// throwaway server started from the PostgreSQL binaries on PATH; with
	// none of them the test is skipped (it fails when $CI is "true").
	URL string
	// Workers is how many worker processes run Op, one operation at a
	// time each. Defaults to 4.
	Workers int
	// Keys is how many keys ("key-0", "key-1", …) the workers pick from
	// at random. Defaults to 1: every worker on the same key.
	Keys int
	// Duration is how long the workers run Op once warmed up; a run goes
	// on past it, for at most the longer of Duration and 20 s, until each
	// fault took effect. Defaults to 3 s.
	Duration time.Duration
	// Lease is the lease your code relies on (its lock's TTL): Pause and
	// Stall hold a worker past it before another worker goes for the key.
	// Zero when nothing is leased. Your code sets its own TTL; this only
	// tells the run.
	Lease time.Duration
	// Faults are injected while the workers run. nil means Pause; an
	// empty slice, none.
	Faults []Fault
	// Seed seeds the workers' random sources and Random's schedule; the
	// same seed replays the same schedule. Defaults to a random seed,
	// printed in the report.
	Seed uint64
	// Init makes the initial state, once per run, in the run's fresh
	// schema before the workers start: your tables and their rows for
	// keys. fencedlock's tables are there already, for code that takes
	// its locks in a fencedlock.Postgres on the worker's pool.
	Init func(ctx context.Context, db *pgxpool.Pool, keys []string) error
	// Input makes the input of an operation on key. nil: the zero I.
	Input func(r *rand.Rand, key string) I
	// Op runs one operation of your code on key, in a worker process, with
	// w's pool: pass ctx on to every call, and down to lockfreetest.Point.
	// Its output is recorded when err is nil. An error is an operation of
	// unknown outcome (it may have applied), unless it is one of Refusals
	// or plainly never reached the server: then it certainly did not.
	Op func(ctx context.Context, w *Worker, key string, in I) (O, error)
	// Refusals are the errors of Op that mean it certainly did nothing: a
	// fenced write (fencedlock.ErrFenced), a conflict your code detects.
	Refusals []error
	// Check holds the history and the state the run left in db to your
	// invariants: return nil when they hold, else the violations (one
	// error each, or errors.Join of several). Optional with Model.
	Check func(ctx context.Context, db *pgxpool.Pool, h History[I, O]) error
	// Model, when set, is a sequential specification that each key's
	// operations must be linearizable to (porcupine). Step is called with
	// an Input of type I and an Output of type Result[O]. Failed
	// operations are left out; one of unknown outcome may take effect at
	// any time after its call, or never.
	Model *porcupine.Model
	// HTML, when set, is a file the run writes its report to as an HTML
	// page: the verdict, the figures, and each worker's timeline.
	HTML string
}

// Worker is one worker process's view of the run, given to Op.
type Worker struct {
	// ID is the worker's number, from 0.
	ID int
	// DB is the worker's pool of connections to the run's schema, through
	// the worker's own proxy: use it (or connections made from its
	// config) for every statement, so that the network faults reach them.
	DB *pgxpool.Pool
}

// Run runs test: its workers as processes of this test binary, which
// re-runs the calling test up to Run and then serves as a worker (so keep
// what comes before Run cheap and free of side effects), its faults, and
// its checks. It fails t when the run could not be made, a fault never
// took effect, or the history could not be checked to the end (a Model's
// search that ran out of time): no verdict is ever a pass. The violations
// it found are in the report, for t to judge.
func Run[I, O any](t testing.TB, test Test[I, O]) *Report[I, O] {
	t.Helper()
	if err := test.validate(); err != nil {
		t.Fatal(err)
	}
	if _, twice := ran.LoadOrStore(t, true); twice {
		t.Fatalf("%v: Run called twice in %s: its workers re-run the test up to Run, so give each Run a test (t.Run) of its own", ErrInvalid, t.Name())
	}
	c, r, err := register(t.Name(), &test)
	if err != nil {
		t.Fatal(err)
	}
	if engine.IsWorker() {
		os.Exit(engine.WorkerMain())
	}
	url := databaseURL(t, test.URL)
	cfg := engine.Config{
		Clients: test.workers(), Keys: test.keys(), Duration: test.duration(), Faults: test.faults(),
		LeaseTTL: test.Lease, Seed: test.Seed, Approaches: []engine.Approach{c.approach},
		Args: []string{"-test.run=" + runPattern(t.Name())},
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	rep, err := engine.Run(t.Context(), engine.Scenario(c), cfg, engine.Infra{URL: url})
	for _, n := range rep.Notes {
		t.Log(n)
	}
	out := newReport(r, rep, cfg.Seed)
	if test.HTML != "" {
		if werr := out.writeHTMLFile(test.HTML); werr != nil {
			t.Error(werr)
		}
	}
	if err != nil {
		t.Fatalf("lockfreetest: %v", err)
	}
	if out.Failed != "" {
		t.Fatalf("lockfreetest: %s", out.Failed)
	}
	if !out.Checked {
		t.Fatalf("lockfreetest: the history could not be checked to the end (%s): no verdict", out.rep.Results[0].Detail)
	}
	t.Logf("lockfreetest: %s", out.Summary())
	return out
}

// ran holds the tests that called Run.
var ran sync.Map

// ErrInvalid is matched by the error of a Test that cannot run.
var ErrInvalid = errors.New("lockfreetest: invalid test")

func (t *Test[I, O]) validate() error {
	switch {
	case t.Op == nil:
		return fmt.Errorf("%w: no Op", ErrInvalid)
	case t.Check == nil && t.Model == nil:
		return fmt.Errorf("%w: neither Check nor Model: nothing would be checked", ErrInvalid)
	case t.Workers < 0 || t.Keys < 0 || t.Duration < 0 || t.Lease < 0:
		return fmt.Errorf("%w: negative Workers, Keys, Duration or Lease", ErrInvalid)
	case t.Workers == 1 && len(t.faults()) > 0:
		return fmt.Errorf("%w: one worker: a fault needs another worker to take the key over", ErrInvalid)
	}
	for _, f := range t.faults() {
		if !allowed[f] {
			return fmt.Errorf("%w: fault %q: want one of pause, stall, isolate, delay, crash, lost-reply, random", ErrInvalid, f)
		}
	}
	return nil
}

var allowed = map[Fault]bool{Pause: true, Stall: true, Isolate: true, Delay: true, Crash: true, LostReply: true, Random: true}

func (t *Test[I, O]) workers() int { return cmp.Or(t.Workers, 4) }
func (t *Test[I, O]) keys() int    { return cmp.Or(t.Keys, 1) }
func (t *Test[I, O]) name() string { return cmp.Or(t.Name, "code") }
func (t *Test[I, O]) faults() []Fault {
	if t.Faults == nil {
		return []Fault{Pause}
	}
	return t.Faults
}

func (t *Test[I, O]) duration() time.Duration { return cmp.Or(t.Duration, 3*time.Second) }

// runPattern is the -test.run pattern that selects the test named name
// (t.Name(): "TestX/sub") and nothing else.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
