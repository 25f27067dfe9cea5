package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// approachDef is the definition of approach a of scenario.
func approachDef(t *testing.T, scenario string, a engine.Approach) engine.ApproachDef {
	t.Helper()
	for _, d := range engine.Approaches(scenario) {
		if d.Approach() == a {
			return d
		}
	}
	t.Fatalf("no approach %s in %s", a, scenario)
	return nil
}

// The same seed and options draw the same schedule; another seed, another
// approach or another duration draws another. Every injection is of a
// fault the approach admits that hits one worker, due in the run, against
// one of its workers, and a stall has a length.
func TestScheduleSeeded(t *testing.T) {
	t.Parallel()
	cfg := engine.Config{Clients: 6, Duration: 20 * time.Second, Seed: 7}
	for _, sc := range engine.Scenarios() {
		for _, def := range engine.Approaches(sc.Name()) {
			s := engine.Schedule(cfg, def)
			if engine.FaultSkip(engine.Random, def) != "" {
				if s != nil {
					t.Errorf("%s/%s: skipped by random, yet a schedule of %d", sc.Name(), def.Approach(), len(s))
				}
				continue
			}
			if again := engine.Schedule(cfg, def); !reflect.DeepEqual(s, again) {
				t.Errorf("%s/%s: seed 7 drew\n%v\nthen\n%v", sc.Name(), def.Approach(), s, again)
			}
			other := cfg
			other.Seed = 8
			if reflect.DeepEqual(s, engine.Schedule(other, def)) {
				t.Errorf("%s/%s: seeds 7 and 8 drew the same schedule %v", sc.Name(), def.Approach(), s)
			}
			checkSchedule(t, def, cfg, s)
		}
	}
	inTx := map[string]bool{}
	for _, sc := range engine.Scenarios() {
		for _, def := range engine.Approaches(sc.Name()) {
			for _, in := range engine.Schedule(cfg, def) {
				inTx[in.At] = true
			}
		}
	}
	if !inTx[engine.AtBeforeWrite] || !inTx[engine.AtInTx] {
		t.Errorf("no schedule drew both points: %v", inTx)
	}
	inv := engine.Approaches("inventory")
	if reflect.DeepEqual(engine.Schedule(cfg, inv[0]), engine.Schedule(cfg, inv[1])) {
		t.Error("two approaches drew the same schedule")
	}
	longer := cfg
	longer.Duration = 40 * time.Second
	if n := len(engine.Schedule(longer, inv[0])); n != 20 {
		t.Errorf("a 40s run drew %d injections, want 20", n)
	}
}

// checkSchedule checks each injection of s, drawn for def under cfg, and
// that some overlap: two due within the burst.
func checkSchedule(t *testing.T, def engine.ApproachDef, cfg engine.Config, s []report.Injection) {
	t.Helper()
	name := def.Scenario() + "/" + string(def.Approach())
	if len(s) != 10 {
		t.Errorf("%s: %d injections in 20s, want 10", name, len(s))
	}
	close := false
	for i, in := range s {
		switch {
		case engine.FaultSkip(in.Fault, def) != "" || engine.WholeRun(in.Fault):
			t.Errorf("%s: %v: a fault it does not admit, or a whole-run one", name, in)
		case in.Worker < 0 || in.Worker >= cfg.Clients:
			t.Errorf("%s: %v: no such worker", name, in)
		case in.AtS < 0 || in.AtS > cfg.Duration.Seconds()*0.7+0.4:
			t.Errorf("%s: %v: due out of the run", name, in)
		case (in.Fault == engine.Stall) != (in.ForS > 0):
			t.Errorf("%s: %v: a length for a stall, and for it only", name, in)
		case (in.At != "") != (engine.PointArmed(in.Fault) && transactor(def)),
			in.At != "" && in.At != engine.AtBeforeWrite && in.At != engine.AtInTx:
			t.Errorf("%s: %v: where it stops its worker (%q) drawn for a fault that stops one at a point in an approach with in-transaction points, and only then", name, in, in.At)
		case in.Outcome != nil:
			t.Errorf("%s: %v: an outcome before it was played", name, in)
		}
		if i > 0 && in.AtS-s[i-1].AtS < 0.4 {
			close = true
		}
	}
	if !close {
		t.Errorf("%s: no two injections due within 0.4s of each other: %v", name, s)
	}
}

// Under a random schedule, really played, the alternative and the fenced
// lock lose nothing, checked; each counts under its fault exactly the
// injections its schedule shows took effect, and the JSON report keeps
// the schedule, its seed and the drawn part equal to a fresh draw.
func TestRandom(t *testing.T) {
	t.Parallel()
	sc, _ := engine.Lookup("inventory")
	cfg := engine.Config{Clients: 4, Keys: 1, Duration: 6 * time.Second, Faults: []engine.Fault{engine.Random}, Seed: 7,
		Approaches: []engine.Approach{engine.Alternative, engine.FencedLock}}
	rep, err := engine.Run(context.Background(), sc, cfg, engine.Infra{URL: testdb.New(t).URL})
	for _, n := range rep.Notes {
		t.Log(n)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var back report.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Seed != 7 {
		t.Errorf("the JSON report's seed is %d, want 7", back.Seed)
	}
	for i, r := range back.Results {
		logResult(t, r)
		t.Logf("%s schedule: %s", r.Approach, r.ScheduleText())
		if !reflect.DeepEqual(r.Schedule, rep.Results[i].Schedule) {
			t.Errorf("%s: the JSON report's schedule %v, the run's %v", r.Approach, r.Schedule, rep.Results[i].Schedule)
		}
		checkRandom(t, r, engine.Schedule(cfg, approachDef(t, "inventory", r.Approach)))
	}
}

// checkRandom holds r, a twin's run under a random schedule, to that
// schedule, drawn: played as drawn, its counts those of its outcomes, and
// nothing lost.
func checkRandom(t *testing.T, r report.Result, drawn []report.Injection) {
	t.Helper()
	if !reflect.DeepEqual(report.Drawn(r.Schedule), drawn) {
		t.Errorf("%s: played %v, drawn %v", r.Approach, report.Drawn(r.Schedule), drawn)
	}
	took := map[engine.Fault]int64{}
	for _, in := range r.Schedule {
		if in.Outcome == nil {
			t.Errorf("%s: %v not played", r.Approach, in)
			continue
		}
		if in.Outcome.StartS < in.AtS {
			t.Errorf("%s: %v began before it was due", r.Approach, in)
		}
		if in.Outcome.Effect {
			took[in.Fault]++
			took[engine.Random]++
		}
	}
	for f, n := range r.FaultsInjected {
		if n != took[f] {
			t.Errorf("%s: %s counted %d times, its schedule shows %d", r.Approach, f, n, took[f])
		}
	}
	if took[engine.Random] == 0 || !slices.ContainsFunc(r.Schedule, func(in report.Injection) bool { return in.Outcome != nil && in.Outcome.Effect }) {
		t.Errorf("%s: no injection took effect", r.Approach)
	}
	if !r.Checked || r.Violations != 0 || r.Ops == 0 {
		t.Errorf("%s: checked %v, %d violations, %d ops: %s", r.Approach, r.Checked, r.Violations, r.Ops, r.Detail)
	}
}

// Each drawn injection carries its number in the draw; Keep plays those it
// lists, as drawn, and a Keep without a random schedule, or not in
// increasing order, is refused before anything runs.
func TestScheduleKeep(t *testing.T) {
	t.Parallel()
	cfg := engine.Config{Clients: 6, Duration: 20 * time.Second, Seed: 7}
	def := engine.Approaches("inventory")[0]
	all := engine.Schedule(cfg, def)
	for i, in := range all {
		if in.N != i {
			t.Fatalf("injection %d of the draw is numbered %d", i, in.N)
		}
	}
	kept := cfg
	kept.Keep = []int{1, 3, 99}
	if got := engine.Schedule(kept, def); !reflect.DeepEqual(got, []report.Injection{all[1], all[3]}) {
		t.Errorf("kept 1, 3 and 99 of %v: %v", all, got)
	}
	sc, _ := engine.Lookup("inventory")
	for _, bad := range []engine.Config{
		{Keep: []int{1}},
		{Faults: []engine.Fault{engine.Random}, Keep: []int{3, 1}},
		{Faults: []engine.Fault{engine.Random}, Keep: []int{-1}},
	} {
		if _, err := engine.Run(context.Background(), sc, bad, engine.Infra{}); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("faults %v, keep %v: %v, want ErrInvalid", bad.Faults, bad.Keep, err)
		}
	}
}

// transactor reports whether def's operations pass in-transaction points.
func transactor(def engine.ApproachDef) bool {
	_, ok := def.(engine.Transactor)
	return ok
}

// With KillBrokers, the schedule of an approach that uses Kafka is the one
// drawn without it plus one broker-kill, meant for no worker, due within
// the run; an approach without Kafka draws the same schedule either way.
func TestScheduleKillsBrokers(t *testing.T) {
	t.Parallel()
	cfg := engine.Config{Clients: 4, Duration: 20 * time.Second, Seed: 7}
	kill := cfg
	kill.KillBrokers = true
	for _, sc := range []string{"orders", "inventory"} {
		def := engine.Approaches(sc)[0]
		without, with := engine.Schedule(cfg, def), engine.Schedule(kill, def)
		var kills []report.Injection
		var rest []report.Injection
		for _, in := range with {
			if in.Fault == engine.BrokerKill {
				kills = append(kills, in)
				continue
			}
			in.N = 0
			rest = append(rest, in)
		}
		for i := range without {
			without[i].N = 0
		}
		want := 0
		if sc == "orders" {
			want = 1
		}
		if len(kills) != want || !reflect.DeepEqual(rest, without) {
			t.Errorf("%s: with broker kills %v, without %v: want the same and %d broker-kill", sc, with, without, want)
		}
		for _, k := range kills {
			if k.Worker != -1 || k.AtS < 0 || k.AtS > cfg.Duration.Seconds()*0.7 {
				t.Errorf("%s: %v: want one meant for no worker, due within the first 70%% of the run", sc, k)
			}
		}
	}
}
