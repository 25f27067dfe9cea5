package plugintest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/approach"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/migrate"
)

// The counter scenario: clients add one to a counter. Its alternative is
// one conditional statement; its naive lock reads under a lease lock and
// writes the read value plus one, unfenced, so that a holder paused past
// its lease writes over the increments made meanwhile.
const (
	sqlCountersTable = `CREATE TABLE counters (id text PRIMARY KEY, n bigint NOT NULL DEFAULT 0)`
	sqlCountersSeed  = `INSERT INTO counters (id) SELECT 'counter-' || i FROM generate_series(0, $1 - 1) AS i`
	sqlCountersFinal = `SELECT id, n FROM counters`
	sqlCounterAdd    = `UPDATE counters SET n = n + 1 WHERE id = $1 RETURNING n`
	sqlCounterRead   = `SELECT n FROM counters WHERE id = $1`
	sqlCounterWrite  = `UPDATE counters SET n = $2 WHERE id = $1`
	kindAdd          = "add"
)

type counterScenario struct{}

func (counterScenario) Name() string { return "counter" }
func (counterScenario) Order() int   { return 1 }
func (counterScenario) Description() string {
	return "clients add one to a counter; every add told is in it"
}
func (counterScenario) Migrations() []migrate.Migration { return nil }

func (counterScenario) Setup(ctx context.Context, db *pgxpool.Pool, s engine.Sizes) error {
	if _, err := db.Exec(ctx, sqlCountersTable); err != nil {
		return err
	}
	_, err := db.Exec(ctx, sqlCountersSeed, s.Keys)
	return err
}

// Check holds each counter to its adds: no two told the same value (one
// overwrote the other: a lost update), and a final value no lower than the
// adds told, no higher than those that may have taken effect.
func (counterScenario) Check(ctx context.Context, db *pgxpool.Pool, ops []history.Op, _ engine.Sizes) (*history.Findings, error) {
	rows, err := db.Query(ctx, sqlCountersFinal)
	if err != nil {
		return nil, err
	}
	var finals []history.Effect
	var e history.Effect
	if _, err := pgx.ForEachRow(rows, []any{&e.Key, &e.Seq}, func() error { finals = append(finals, e); return nil }); err != nil {
		return nil, err
	}
	inv, err := history.NewInvariant("counter", ops, finals, kindAdd)
	if err != nil {
		return nil, err
	}
	for _, k := range inv.Keys() {
		checkCounter(inv, k)
	}
	return inv.Findings(), nil
}

func checkCounter(inv *history.Invariant, k string) {
	told := map[int64]*history.Op{}
	for _, op := range inv.Ops(k) {
		var n int64
		if op.Outcome != history.OK || json.Unmarshal(op.Output, &n) != nil {
			continue
		}
		if first := told[n]; first != nil {
			inv.Add(k, history.Violation{Anomaly: history.LostUpdate,
				Marks: []history.Mark{{Op: *op, Role: history.Stale}, {Op: *first, Role: history.Clobbered}},
				Text:  fmt.Sprintf("%s and %s were both told %d", inv.Did(op, kindAdd), inv.Did(first, kindAdd), n)})
		}
		told[n] = op
	}
	ok, _ := history.Count(inv.Ops(k), history.OK)
	unsure, _ := history.Count(inv.Ops(k), history.Unknown)
	for _, f := range inv.Effects(k) {
		if f.Seq < ok || f.Seq > ok+unsure {
			inv.Add(k, history.Violation{Anomaly: history.Missing,
				Text: fmt.Sprintf("counter %s ended at %d after %d adds told and %d uncertain", k, f.Seq, ok, unsure)})
		}
	}
}

// counterApproach is one approach of the scenario: naive says whether it
// takes the naive lease lock around a read and a write, instead of one
// conditional statement.
type counterApproach struct{ naive bool }

func (a counterApproach) Scenario() string { return "counter" }

func (a counterApproach) Approach() engine.Approach {
	if a.naive {
		return engine.NaiveLock
	}
	return engine.Alternative
}

func (a counterApproach) Label() string {
	if a.naive {
		return "lease lock: lock → SELECT → UPDATE without the token → release"
	}
	return "UPDATE … SET n = n + 1 RETURNING n"
}

func (a counterApproach) Protection(p engine.Params) engine.Protection {
	if a.naive {
		return engine.LockTTL(p)
	}
	return engine.Protection{}
}

func (a counterApproach) NewClient(_ context.Context, env *engine.Env) (engine.Client, error) {
	c := &counterClient{env: env}
	if a.naive {
		var err error
		if c.locker, err = approach.NaiveLocker(env, "counter/"); err != nil {
			return nil, err
		}
	}
	return c, nil
}

type counterClient struct {
	env    *engine.Env
	locker *fencedlock.Locker // nil: the alternative
}

func (c *counterClient) Op(ctx context.Context) error {
	ctx, op, err := c.env.Invoke(ctx, engine.Key("counter-", c.env.Rand.IntN(c.env.Keys)), kindAdd, nil)
	if err != nil {
		return err
	}
	var n int64
	if c.locker == nil {
		c.env.BeforeWrite(ctx, "plugintest.counter.alternative.before-write")
		err = c.env.DB.QueryRow(ctx, sqlCounterAdd, op.Key()).Scan(&n)
		return op.Finish(n, err)
	}
	err = c.locker.Do(ctx, op.Key(), func(context.Context, fencedlock.Lease) error {
		if err := c.env.DB.QueryRow(ctx, sqlCounterRead, op.Key()).Scan(&n); err != nil {
			return err
		}
		n++
		c.env.BeforeWrite(ctx, "plugintest.counter.naive.before-write")
		_, err := c.env.DB.Exec(ctx, sqlCounterWrite, op.Key(), n)
		return err
	})
	return op.Finish(n, err)
}

func (c *counterClient) Close() error { return nil }

// The scenario plugs in with its registration alone: no file of the
// engine's names it.
func init() {
	engine.Register(counterScenario{})
	engine.RegisterApproach(counterApproach{})
	engine.RegisterApproach(counterApproach{naive: true})
}

// A scenario the engine was never told of runs through it under pause: the
// engine finds it in its registry, starts its workers (this test binary),
// stops them at the scenario's own before-write points past the lease the
// approach declares, and checks the history with the scenario's own check.
// The alternative loses nothing; the naive lock, the foil, loses adds in
// some run of three, which proves the fault bit and the check saw it.
func TestCounterScenarioPlugsIn(t *testing.T) {
	if got := engine.Names(); !slices.Equal(got, []string{"counter"}) {
		t.Fatalf("registered scenarios %v, want the counter alone", got)
	}
	sc, _ := engine.Lookup("counter")
	infra := engine.Infra{URL: testdb.New(t).URL}
	cfg := engine.Config{Clients: 4, Keys: 1, Duration: 3 * time.Second, Faults: []engine.Fault{engine.Pause},
		Approaches: []engine.Approach{engine.Alternative, engine.NaiveLock}} // not the hog: stall_test.go
	rep, err := engine.Run(context.Background(), sc, cfg, infra)
	for _, n := range rep.Notes {
		t.Log(n)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 {
		t.Fatalf("%d results, want the alternative's and the naive lock's", len(rep.Results))
	}
	for _, r := range rep.Results {
		t.Logf("%s: ops=%d pauses=%d violations=%d checked=%v %s", r.Approach, r.Ops, r.FaultsInjected[engine.Pause], r.Violations, r.Checked, r.Detail)
		switch {
		case !r.Checked:
			t.Errorf("%s: not checked: %s", r.Approach, r.Detail)
		case r.FaultsInjected[engine.Pause] == 0:
			t.Errorf("%s: no pause took effect", r.Approach)
		case r.Approach == engine.Alternative && (r.Violations != 0 || r.Ops == 0):
			t.Errorf("alternative: %d violations, %d ops: %s", r.Violations, r.Ops, r.Detail)
		case r.Approach == engine.NaiveLock && r.Violations == 0:
			if !naiveLoses(t, sc, cfg, infra) {
				t.Errorf("naive-lock: no lost add in 3 runs under pause: the fault did not bite, or the check missed it")
			}
		}
	}
}

// naiveLoses runs the naive lock alone again, twice at most, and reports
// whether a run lost an add: whether a stale write lands where it
// overwrites another add depends on the taker's timing.
func naiveLoses(t *testing.T, sc engine.Scenario, cfg engine.Config, infra engine.Infra) bool {
	cfg.Approaches = []engine.Approach{engine.NaiveLock}
	for run := 2; run <= 3; run++ {
		rep, err := engine.Run(context.Background(), sc, cfg, infra)
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Results[0]
		t.Logf("naive-lock, run %s: pauses=%d violations=%d %s", strconv.Itoa(run), r.FaultsInjected[engine.Pause], r.Violations, r.Detail)
		if r.Checked && r.Violations > 0 {
			return true
		}
	}
	return false
}
