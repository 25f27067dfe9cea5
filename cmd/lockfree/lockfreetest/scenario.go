package lockfreetest

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/localpg"
	"github.com/lockfree-go/lockfree/migrate"
)

// kindOp is the kind of every operation of a Test's history.
const kindOp = "op"

// runner is a Test with its types erased, as the engine's scenario and
// approach call it.
type runner interface {
	keyNames(n int) []string
	init(ctx context.Context, db *pgxpool.Pool, keys []string) error
	op(ctx context.Context, env *engine.Env, key string) error
	check(ctx context.Context, db *pgxpool.Pool, ops []history.Op) (*history.Findings, error)
	label() string
	lease() engine.Protection
}

// scenario is one test's entry in the engine's registry: the engine knows
// it by the test's name and finds the Test registered last under it (a
// test run with -count=N registers N times).
type scenario struct {
	name     string
	approach engine.Approach
}

var tests = struct {
	sync.Mutex
	byName map[string]runner
	// testOf is the test each scenario name was made from.
	testOf map[string]string
}{byName: map[string]runner{}, testOf: map[string]string{}}

// register makes test the one the scenario of the test named testName runs.
// Two tests whose names make the same scenario name (TestA_b, TestA/b)
// would run each other's Test: the second is refused.
func register[I, O any](testName string, test *Test[I, O]) (scenario, *typed[I, O], error) {
	name := scenarioName(testName)
	c, r := scenario{name: name, approach: engine.Approach(test.name())}, &typed[I, O]{test: test}
	tests.Lock()
	first, known := tests.testOf[name]
	if known && first != testName {
		tests.Unlock()
		return c, nil, fmt.Errorf("%w: tests %s and %s both make the scenario name %s: rename one", ErrInvalid, first, testName, name)
	}
	tests.byName[name], tests.testOf[name] = r, testName
	tests.Unlock()
	if !known {
		engine.Register(c)
		engine.RegisterApproach(approachDef{c})
	}
	return c, r, nil
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// scenarioName makes a test's name a scenario's: lower case, letters and
// digits, as the engine puts it in schema names.
func scenarioName(testName string) string {
	return strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(testName), "-"), "-")
}

func (c scenario) runner() runner {
	tests.Lock()
	defer tests.Unlock()
	return tests.byName[c.name]
}

func (c scenario) Name() string                    { return c.name }
func (c scenario) Order() int                      { return 0 }
func (c scenario) Description() string             { return "your operation, under lockfreetest's faults" }
func (c scenario) Migrations() []migrate.Migration { return nil }

func (c scenario) Setup(ctx context.Context, db *pgxpool.Pool, s engine.Sizes) error {
	r := c.runner()
	return r.init(ctx, db, r.keyNames(s.Keys))
}

func (c scenario) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	return c.runner().check(ctx, db, ops)
}

// SharesProcesses: Op is a request handler; nothing in it is the worker's
// own identity.
func (scenario) SharesProcesses() {}

// approachDef is the code under test, the scenario's one approach.
type approachDef struct{ c scenario }

func (a approachDef) Scenario() string          { return a.c.name }
func (a approachDef) Approach() engine.Approach { return a.c.approach }
func (a approachDef) Label() string             { return a.c.runner().label() }

func (a approachDef) Protection(engine.Params) engine.Protection { return a.c.runner().lease() }

func (a approachDef) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	r := a.c.runner()
	return &client{env: env, r: r, keys: r.keyNames(env.Keys)}, nil
}

type client struct {
	env  *engine.Env
	r    runner
	keys []string
}

// Op runs one operation: on the key the run directs the worker to (a
// taker), or one drawn.
func (c *client) Op(ctx context.Context) error {
	key := c.env.Directed()
	if key == "" {
		key = c.keys[c.env.Rand.IntN(len(c.keys))]
	}
	return c.r.op(ctx, c.env, key)
}

func (c *client) Close() error { return nil }

// databaseURL is the server a test runs on (Test.URL's documentation).
func databaseURL(t testing.TB, url string) string {
	t.Helper()
	for _, u := range []string{url, os.Getenv("LOCKFREE_TEST_DATABASE_URL"), os.Getenv("TEST_DATABASE_URL")} {
		if u != "" {
			return u
		}
	}
	if !localpg.Available() {
		msg := "lockfreetest: no PostgreSQL: set Test.URL or $LOCKFREE_TEST_DATABASE_URL, or put PostgreSQL's binaries on PATH"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	srv, err := localpg.Start(context.Background())
	if err != nil {
		t.Fatalf("lockfreetest: starting a throwaway PostgreSQL: %v", err)
	}
	t.Cleanup(srv.Stop)
	return srv.URL
}

// keyNames are the keys of a run of n keys.
func keyNames(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	return keys
}
