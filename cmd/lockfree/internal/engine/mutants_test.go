//go:build lockfree_mutants

package engine_test

import (
	"bytes"
	"cmp"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
)

var (
	mutantsTable = flag.String("mutants-table", "", "TestMutants writes its table (Markdown) to this file")
	mutantsOnly  = flag.String("mutants-only", "", "TestMutants hunts only the mutants whose names match this regexp")
	// A hunt of the mutants of one package needs only the scenarios that
	// reach its sites (kafkawriter's: events): the others' runs without a
	// mutant take most of a short hunt's minutes.
	mutantsScenarios = flag.String("mutants-scenarios", "", "TestMutants runs only the scenarios whose names match this regexp")
	// A catch made once may be luck: the run that made it runs again,
	// mutantsRate times in all, and a mutant caught in fewer is unsteady.
	mutantsRate = flag.Int("mutants-rate", 1, "TestMutants runs the run that caught each mutant this many times in all, and fails on one caught in fewer")
	// Random schedules find what the fixed trials were not written for:
	// each mutant a scenario reaches gets this many seeds of the random
	// fault (the defects of mutantDefects at least defectSeeds), after the
	// fixed trials, or instead of them for a defect.
	mutantsRandom         = flag.Int("mutants-random", 0, "TestMutants also tries each mutant a scenario reaches under the random fault with seeds 1..N")
	mutantsRandomDuration = flag.Duration("mutants-random-duration", 10*time.Second, "how long each random-schedule run of TestMutants lasts")
)

// mutantTrials are the runs a mutant is tried in, in order, each an
// approach under a fault it loses nothing under without a mutant (TestFaults,
// and the fault-free runs of reachedSites), so that a violation is the
// mutant's: the naive lock without faults, where nothing but the lock keeps
// two clients apart (the cheapest run: no fault to wait out), and the
// coalescing alternative without faults (its clients sharing processes,
// their sales one step); the
// alternative and the fenced lock under a pause past the lease (it catches a
// missing fence and, with the clients' contention, a missing condition), and
// the lock and the epoch verified in the write's transaction (accounts'
// verified-lock and verified-alternative, the uses of fencedlock's and
// partition's Postgres.Verify);
// then under the late delivery of a cut worker's write; then the
// alternative under a COMMIT whose answer was lost, which its worker
// retries (the inbox's offset condition), and under lost answers, as the
// coalescing alternative too (a step's lost answer must be ErrUncertain);
// then the alternative under a partition member's
// heartbeats held while its calls go on (its check of its lease), and under
// a member stopped in a handoff until others claimed what it releases (the
// release's epoch condition); then the fenced lock under a consumer stopped
// with a fetched batch until another applied past it (the skip of events
// already applied); last the fenced lock under a renewal held past its
// lease's expiry while no other worker could take the key (late-renewal),
// which the lock service must refuse; then the alternative under a crash,
// whose replacement starts under the crashed worker's names while its lease
// is in force (a member's Join); then under a cut worker, whose relay's
// publish may fail with its outcome unknown while Kafka never had it; last
// the fenced lock without faults, whose clients, never stopped, acquire
// the most (inventory's baskets: AcquireAll); last the alternative without
// faults, whose producers send some events twice (events: the inbox's ID
// check).
var mutantTrials = []mutantTrial{
	{engine.NaiveLock, ""},
	{engine.Coalesced, ""},
	{engine.Alternative, engine.Pause},
	{engine.FencedLock, engine.Pause},
	{engine.VerifiedLock, engine.Pause},
	{engine.VerifiedAlternative, engine.Pause},
	{engine.Alternative, engine.Delay},
	{engine.FencedLock, engine.Delay},
	{engine.Alternative, engine.LostCommit},
	{engine.Alternative, engine.LostReply},
	{engine.Coalesced, engine.LostReply},
	{engine.Alternative, engine.LateHeartbeat},
	{engine.Alternative, engine.HandoffPause},
	{engine.FencedLock, engine.Overtake},
	{engine.FencedLock, engine.LateRenewal},
	{engine.Alternative, engine.Crash},
	{engine.Alternative, engine.Isolate},
	{engine.FencedLock, ""},
	{engine.Alternative, ""},
}

// mutantTrial is an approach under a fault ("" for none).
type mutantTrial struct {
	approach engine.Approach
	fault    engine.Fault
}

// mutantCatchers name, for the mutants whose hunt in mutantTrials' order
// takes many runs (7 to 27 in a full hunt, up to 100 s each), the run that
// caught each in the last full hunt. huntMutant tries it first, and goes on
// in mutantTrials' order when it misses: a stale entry costs one run, never
// a catch. A catch counts the same either way (hits, checked, violations;
// its twin), and the table names the run that made it.
var mutantCatchers = map[string]mutantCatcher{
	"fencedlock.renew.expired":                     {"singleton", engine.FencedLock, engine.LateRenewal},
	"fencedlock.renew.tenure":                      {"singleton", engine.Alternative, engine.Delay},
	"partition.join.live":                          {"accounts", engine.Alternative, engine.Crash},
	"partition.claim.owner":                        {"accounts", engine.Alternative, engine.LateHeartbeat},
	"partition.member.paused":                      {"accounts", engine.Alternative, engine.LateHeartbeat},
	"idempotency.client.same-key":                  {"orders", engine.Alternative, engine.LostReply},
	"kafkawriter.inbox.advance.offset":             {"events", engine.Alternative, engine.LostCommit},
	"atomic.id.replay":                             {"inventory", engine.Alternative, engine.LostReply},
	"kafkawriter.consumer.batch-retry.lost-commit": {"events", engine.Alternative, engine.LostCommit},
	"outbox.relay.uncertain":                       {"orders", engine.Alternative, engine.Isolate},
	"partition.release.epoch":                      {"accounts", engine.Alternative, engine.HandoffPause},
	"idempotency.leased.release.token":             {"payments-leased", engine.Alternative, engine.Pause},
	"leader.term.context":                          {"singleton", engine.Alternative, engine.Pause},
	"fencedlock.release.tenure":                    {"payments", engine.FencedLock, engine.Pause},
	"kafkawriter.inbox.claim.epoch":                {"events", engine.Alternative, engine.Pause},
	"fencedlock.acquire.clear-value":               {"singleton", engine.FencedLock, engine.Pause},
	"fencedlock.value.tenure":                      {"singleton", engine.FencedLock, engine.Pause},
	"atomic.inorder.uncertain":                     {"inventory", engine.Coalesced, engine.LostReply},
	"fencedlock.acquireall.atomic":                 {"inventory", engine.FencedLock, engine.Pause},
	"fencedlock.acquireall.order":                  {"inventory", engine.FencedLock, ""},
	"idempotency.client.unkeyed":                   {"orders", engine.Alternative, engine.Pause},
	"atomic.refusal.recheck":                       {"inventory", engine.Alternative, engine.Pause},
	"kafkawriter.inbox.dedupe.seq":                 {"orders", engine.Alternative, engine.Crash},
	"kafkawriter.inbox.dedupe.event-id":            {"events", engine.Alternative, ""},
}

// mutantLayers are layered checks: mutant sites of which one at least is
// masked by the others, so that no run catches it alone (it is in
// mutantHoles, saying so). Each layer is hunted as one row, its sites all on in every worker
// ($LOCKFREE_MUTANTS naming them, comma-separated), on its catcher's run,
// and must be caught in all its runs: together the checks matter.
var mutantLayers = []mutantLayer{}

// mutantLayer is one entry of mutantLayers.
type mutantLayer struct {
	sites   []string
	doc     string
	catcher mutantCatcher
}

// name is the layer's $LOCKFREE_MUTANTS, its row's mutant.
func (l mutantLayer) name() string { return strings.Join(l.sites, ",") }

// layerHits is how often the workers reached mutant's sites: the fewest
// of them, for a layer.
func layerHits(hits map[string]int64, mutant string) int64 {
	n := int64(-1)
	for _, site := range strings.Split(mutant, ",") {
		if n < 0 || hits[site] < n {
			n = hits[site]
		}
	}
	return max(n, 0)
}

// huntLayer runs l on its catcher's run, on an approach that reached every
// one of its sites (reached), and rates the catch.
func huntLayer(t *testing.T, infra engine.Infra, base engine.Config, l mutantLayer, reached map[string][]reach) mutantRun {
	c := l.catcher
	row := mutantRun{mutant: l.name(), doc: l.doc, scenario: c.scenario, approach: c.approach, fault: c.fault}
	for _, site := range l.sites {
		if !slices.ContainsFunc(reached[site], func(r reach) bool { return r.scenario == c.scenario && r.approach == c.approach }) {
			t.Errorf("layer %s: %s/%s does not reach %s", l.name(), c.scenario, c.approach, site)
			return row
		}
	}
	row = tryMutant(t, infra, base, l.name(), reach{scenario: c.scenario, approach: c.approach}, c.fault, 0)
	row.doc = l.doc
	rate(t, infra, base, &row)
	return row
}

// mutantCatcher is one run of the hunt: a scenario's approach under a
// fault of mutantTrials.
type mutantCatcher struct {
	scenario string
	approach engine.Approach
	fault    engine.Fault
}

// checkCatchers fails t on an entry of mutantCatchers that names no
// mutant site, or a run outside mutantTrials, and on an entry of
// mutantDefects that names no mutant site.
func checkCatchers(t *testing.T) {
	for name := range mutantDefects {
		if !slices.ContainsFunc(failpoint.Registered(), func(p failpoint.Point) bool { return p.Name == name && p.Kind == failpoint.MutantSite }) {
			t.Errorf("mutantDefects names %s, no mutant site", name)
		}
	}
	for _, l := range mutantLayers {
		if !slices.ContainsFunc(l.sites, func(site string) bool { _, hole := mutantHoles[site]; return hole }) {
			t.Errorf("mutantLayers' %s: none of its sites is in mutantHoles: a layer is for a site the others mask", l.name())
		}
		if !slices.Contains(mutantTrials, mutantTrial{l.catcher.approach, l.catcher.fault}) {
			t.Errorf("mutantLayers' %s: %s under %s is not a run of mutantTrials", l.name(), l.catcher.approach, l.catcher.fault)
		}
	}
	for name, c := range mutantCatchers {
		switch {
		case !slices.ContainsFunc(failpoint.Registered(), func(p failpoint.Point) bool { return p.Name == name && p.Kind == failpoint.MutantSite }):
			t.Errorf("mutantCatchers names %s, no mutant site", name)
		case !slices.Contains(mutantTrials, mutantTrial{c.approach, c.fault}):
			t.Errorf("mutantCatchers names %s/%s under %s for %s: not a run of mutantTrials", c.scenario, c.approach, c.fault, name)
		}
	}
}

// mutantTargets is how many of the scenarios whose approach reaches a
// mutant's site (the most-hit first) each trial runs; a known hole
// (mutantHoles) gets its first run only, which shows whether it is still
// one. Both keep make mutants within its minutes.
const mutantTargets = 2

// mutantRun is one run of one mutant against one scenario's approach.
type mutantRun struct {
	mutant, doc string // doc: what the mutant does, from the registry
	scenario    string
	approach    engine.Approach
	fault       engine.Fault
	seed        uint64 // under the random fault: the schedule's seed
	violations  int64
	checked     bool
	hits        int64  // how often the workers reached the mutant's site
	detail      string // what the check found, from the report
	err         error
	// test is the package test run for a site out of every scenario's
	// reach (packageCatchers), with how it ended without the mutant and
	// with it; scenarioCaught: a scenario's run caught it all the same.
	test                 *packageCatcher
	passedWithout, fails bool
	scenarioCaught       bool
	// runs and catches: how often the catching run ran (mutantsRate) and
	// caught it (rate).
	runs, catches int
	// random is what the random schedules found (randomHunt), nil when
	// none was tried.
	random *randomCatch
}

// randomCatch is a mutant's hunt with random fault schedules: seeds 1 to
// tried were played, each for the same duration, and the first that caught
// it (0 for none) after seconds of runs.
type randomCatch struct {
	seed, tried uint64
	seconds     float64
	duration    time.Duration
}

// caught reports whether the run caught its mutant: its package test
// failed with it only, or the run found violations — all of them real,
// even where part of the history could not be checked (a "≥n" figure: a
// mutant's history may exhaust the linearizability search).
func (m mutantRun) caught() bool {
	if m.test != nil {
		return m.passedWithout && m.fails
	}
	return m.violations > 0 && m.hits > 0
}

// reach is one scenario's approach that reaches a mutant site.
type reach struct {
	scenario string
	approach engine.Approach
	hits     int64
}

// TestMutants builds nothing of its own: this test binary, built with the
// lockfree_mutants tag, has every mutant site of the module compiled in, and
// the harness re-executes it as its workers with $LOCKFREE_MUTANTS naming
// the one mutant of a run. It first runs every scenario's approaches of
// mutantTrials once without a mutant and without faults, to learn which of
// them reach which site (the workers' hit counts) — one that loses anything
// there is left out, with a note under the table; then, for every mutant site in failpoint's registry, it tries the
// approaches that reach it, under their trial faults, until one run shows a
// violation. A mutant that no run catches is a hole in the proof: the test
// fails on it, unless mutantHoles names it with the reason, and fails on a
// hole listed there that a run now catches.
func TestMutants(t *testing.T) {
	if !failpoint.MutantsBuilt {
		t.Fatal("built without the lockfree_mutants tag")
	}
	infra := engine.Infra{URL: testdb.New(t).URL, Kafka: testkafka.Brokers(t)}
	base := engine.Config{Clients: 4, Keys: 1, Duration: 1500 * time.Millisecond, LeaseTTL: 250 * time.Millisecond}
	only := regexp.MustCompile(*mutantsOnly)
	var hunted []failpoint.Point
	for _, p := range failpoint.Registered() {
		if p.Kind == failpoint.MutantSite && only.MatchString(p.Name) {
			hunted = append(hunted, p)
		}
	}
	checkCatchers(t)
	var notes []string
	var reached map[string][]reach
	if slices.ContainsFunc(hunted, func(p failpoint.Point) bool { c, ok := packageCatchers[p.Name]; return !ok || siteFiles[c.why] == "" }) {
		reached = reachedSites(t, infra, base, &notes)
	}
	// The mutants are hunted side by side (go test's -parallel, four by
	// default: TestMain): each run has a schema, a topic and workers of its own, and a
	// catch counts only if its twin without the mutant loses nothing
	// (tryMutant), so that neither a loaded machine's late worker nor a
	// defect of the approach itself is taken for the mutant's doing.
	var layers []mutantLayer
	for _, l := range mutantLayers {
		if slices.ContainsFunc(l.sites, only.MatchString) {
			layers = append(layers, l)
		}
	}
	if len(layers) > 0 && reached == nil {
		reached = reachedSites(t, infra, base, &notes)
	}
	rows := make([]mutantRun, len(hunted)+len(layers))
	t.Run("hunt", func(t *testing.T) {
		for i, l := range layers {
			t.Run(l.name(), func(t *testing.T) {
				t.Parallel()
				row := huntLayer(t, infra, base, l, reached)
				t.Logf("%s: %s", row.mutant, row.verdict())
				rows[len(hunted)+i] = row
			})
		}
		for i, p := range hunted {
			t.Run(p.Name, func(t *testing.T) {
				t.Parallel()
				var row mutantRun
				if c, ok := packageCatchers[p.Name]; ok {
					row = catchInPackage(t, infra, base, p.Name, c, reached)
				} else {
					passes := targetsOf(reached, p.Name)
					row = huntMutant(t, infra, base, p.Name, passes...)
					randomHunt(t, infra, base, &row, slices.Concat(passes...))
				}
				rate(t, infra, base, &row)
				row.doc = p.Doc
				t.Logf("%s: %s", p.Name, row.verdict())
				rows[i] = row
			})
		}
	})
	whys := map[outOfReach]bool{}
	for _, r := range rows {
		if r.test != nil {
			whys[r.test.why] = true
		}
	}
	table := mutantTrialsLine(base) + "\n\n" + mutantMarkdown(rows)
	for _, why := range []outOfReach{inMemory, inMiddleware, inOneStatement, inDescheduling} {
		if whys[why] {
			table += "\n" + outOfReachNotes[why] + "\n"
		}
	}
	for _, n := range notes {
		table += "\n" + n + "\n"
	}
	t.Log("\n" + table)
	if *mutantsTable != "" {
		if err := os.WriteFile(*mutantsTable, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows[len(hunted):] {
		if !r.caught() || !r.steady() {
			t.Errorf("layer %s: caught in %d of %d runs of %s/%s under %s: its checks together do not show that they matter (%s)",
				r.mutant, r.catches, r.runs, r.scenario, r.approach, r.faultName(), r.verdict())
		}
	}
	for _, r := range rows[:len(hunted)] {
		_, known := mutantHoles[r.mutant]
		_, unsteady := mutantUnsteady[r.mutant]
		switch {
		case r.test != nil && r.scenarioCaught:
			t.Errorf("%s is listed in packageCatchers as out of every scenario's reach (%s), but %s/%s under %s caught it: remove it from packageCatchers",
				r.mutant, r.test.why, r.scenario, r.approach, r.faultName())
		case unsteady:
			// Either outcome is what its reason says: the table shows which.
		case r.caught() && known:
			t.Errorf("%s is caught now (%s/%s under %s): remove it from mutantHoles", r.mutant, r.scenario, r.approach, r.faultName())
		case !r.caught() && !known:
			t.Errorf("%s: no scenario catches it: a hole in the proof (%s)", r.mutant, r.verdict())
		case mutantDefects[r.mutant] != "" && r.random != nil && r.random.seed == 0:
			t.Errorf("%s (%s): no random schedule caught it (%s)", r.mutant, mutantDefects[r.mutant], r.randomCell())
		case r.caught() && !r.steady() && !known:
			t.Errorf("%s: caught in %d of %d runs of %s/%s under %s: unsteady", r.mutant, r.catches, r.runs, r.scenario, r.approach, r.faultName())
		}
	}
}

// reachedSites runs each scenario's trial approaches once, without a mutant
// or a fault, and returns, per mutant site, the approaches whose workers
// reached it, the most-hit first. One that loses anything there is left out,
// with a note: its violations under a mutant would prove nothing.
func reachedSites(t *testing.T, infra engine.Infra, base engine.Config, notes *[]string) map[string][]reach {
	out := map[string][]reach{}
	only := regexp.MustCompile(*mutantsScenarios)
	for _, sc := range engine.Scenarios() {
		if !only.MatchString(sc.Name()) {
			continue
		}
		cfg := base
		for _, tr := range mutantTrials {
			if !slices.Contains(cfg.Approaches, tr.approach) {
				cfg.Approaches = append(cfg.Approaches, tr.approach)
			}
		}
		cfg.Hits = func(a engine.Approach, hits map[string]int64) {
			for name, n := range hits {
				out[name] = append(out[name], reach{scenario: sc.Name(), approach: a, hits: n})
			}
		}
		rep, err := engine.Run(context.Background(), sc, cfg, infra)
		if err != nil {
			t.Fatalf("%s without a mutant: %v", sc.Name(), err)
		}
		for _, r := range rep.Results {
			if !r.Checked || r.Violations > 0 {
				// Its violations under a mutant would prove nothing: it is
				// not tried in this hunt, and the table says so.
				dirty := fmt.Sprintf("%s/%s lost something without a mutant or a fault (checked %v, %d violations: %s): not tried",
					sc.Name(), r.Approach, r.Checked, r.Violations, r.Detail)
				t.Log(dirty)
				*notes = append(*notes, dirty)
				for name, rs := range out {
					out[name] = slices.DeleteFunc(rs, func(x reach) bool { return x.scenario == sc.Name() && x.approach == r.Approach })
				}
			}
		}
	}
	for _, rs := range out {
		slices.SortStableFunc(rs, func(a, b reach) int { return int(b.hits - a.hits) })
	}
	return out
}

// targetsOf returns the hunt's passes over the trials: first the approaches
// that reached mutant's site without a fault, then — unless it is a known
// hole — the others that reached another site of its package, the most-hit
// first. A site reached only under a fault (a branch taken only when a
// lease is not safely held), or only now and then (a renewal: only a lock
// held past a third of its TTL renews), may have been reached in the run
// without faults by no approach, or by one alone and not by the one whose
// fault catches it.
func targetsOf(reached map[string][]reach, mutant string) [][]reach {
	direct := reached[mutant]
	if _, known := mutantHoles[mutant]; known {
		return [][]reach{direct} // its reason says why; the hunt keeps within its minutes
	}
	var more []reach
	for _, r := range packageTargets(reached, mutant) {
		if !slices.ContainsFunc(direct, func(x reach) bool { return x.scenario == r.scenario && x.approach == r.approach }) {
			more = append(more, r)
		}
	}
	return [][]reach{direct, more}
}

// packageTargets are the approaches that reached a site of mutant's
// package, the most-hit first.
func packageTargets(reached map[string][]reach, mutant string) []reach {
	pkg, _, _ := strings.Cut(mutant, ".")
	best := map[[2]string]reach{}
	for name, rs := range reached {
		if p, _, _ := strings.Cut(name, "."); p != pkg {
			continue
		}
		for _, r := range rs {
			k := [2]string{r.scenario, string(r.approach)}
			if r.hits > best[k].hits {
				best[k] = r
			}
		}
	}
	out := slices.Collect(maps.Values(best))
	slices.SortFunc(out, func(a, b reach) int {
		return cmp.Or(cmp.Compare(b.hits, a.hits), cmp.Compare(a.scenario, b.scenario), cmp.Compare(a.approach, b.approach))
	})
	return out
}

// huntMutant tries mutant in each trial on each pass's approaches, pass
// after pass, and returns the first run that catches it, or the last one
// tried.
func huntMutant(t *testing.T, infra engine.Infra, base engine.Config, mutant string, passes ...[]reach) mutantRun {
	last := mutantRun{mutant: mutant}
	if c, ok := mutantCatchers[mutant]; ok {
		for _, tg := range slices.Concat(passes...) {
			if tg.scenario != c.scenario || tg.approach != c.approach {
				continue
			}
			run := tryMutant(t, infra, base, mutant, tg, c.fault, 0)
			if run.caught() {
				return run
			}
			t.Logf("%s: mutantCatchers' run (%s/%s under %s) missed it; the hunt goes on in order", mutant, c.scenario, c.approach, c.fault)
			last = run
			break
		}
	}
	for _, targets := range passes {
		if run, ok := huntPass(t, infra, base, mutant, targets, &last); ok {
			return run
		}
	}
	return last
}

// huntPass tries mutant in each trial on targets; ok when a run caught it
// (or, for a known hole, when its first run is made). *last is the last run
// tried.
func huntPass(t *testing.T, infra engine.Infra, base engine.Config, mutant string, targets []reach, last *mutantRun) (mutantRun, bool) {
	_, known := mutantHoles[mutant]
	for _, tr := range mutantTrials {
		var tries []reach
		for _, tg := range targets {
			if tg.approach == tr.approach && len(tries) < mutantTargets {
				tries = append(tries, tg)
			}
		}
		// Fewer approaches than mutantTargets: the first runs again, so
		// that each trial has as many chances at a catch whose timing
		// varies (a redelivery, a renewal delivered late).
		for len(tries) > 0 && len(tries) < mutantTargets && !known {
			tries = append(tries, tries[0])
		}
		for _, tg := range tries {
			run := tryMutant(t, infra, base, mutant, tg, tr.fault, 0)
			if run.caught() || known {
				return run, true
			}
			*last = run
		}
	}
	return *last, false
}

// runMutant runs tg's approach with mutant on in every worker, under f (none
// when empty; under the random fault, the schedule drawn from seed).
func runMutant(t *testing.T, infra engine.Infra, base engine.Config, mutant string, tg reach, f engine.Fault, seed uint64) mutantRun {
	sc, _ := engine.Lookup(tg.scenario)
	cfg := base
	if f != "" {
		cfg.Faults = []engine.Fault{f}
	}
	cfg.Approaches = []engine.Approach{tg.approach}
	cfg.Env = []string{"LOCKFREE_MUTANTS=" + mutant}
	switch {
	case f == engine.Random:
		cfg.Seed = seed // base.Duration is the random hunt's (randomHunt)
	case f != "":
		// A fault waits out the lease that protects the approach: a run of
		// a few leases has room for a few faults whatever the lease (the
		// accounts members' 1.1 s as well as the locks' 250 ms). It goes on
		// until its fault took effect twice, in two workers (round-robin):
		// a scenario's workers may take different paths (payments-leased's
		// completion and release of a superseded attempt).
		cfg.Duration = max(cfg.Duration, 4*protection(tg, cfg))
		cfg.MinFaults = 2
	}
	run := mutantRun{mutant: mutant, scenario: tg.scenario, approach: tg.approach, fault: f, seed: seed}
	cfg.Hits = func(_ engine.Approach, hits map[string]int64) { run.hits = layerHits(hits, mutant) }
	rep, err := engine.Run(context.Background(), sc, cfg, infra)
	run.err = err
	if err != nil {
		// Why a fault did not take effect, or what went wrong.
		for _, n := range rep.Notes {
			t.Logf("%s on %s/%s: %s", mutant, tg.scenario, tg.approach, n)
		}
	}
	for _, r := range rep.Results {
		run.violations, run.checked, run.detail = r.Violations, r.Checked, r.Detail
	}
	t.Logf("%s on %s/%s under %s: %d violations (checked %v), site hit %d times, err %v; %s",
		mutant, tg.scenario, tg.approach, run.faultName(), run.violations, run.checked, run.hits, err, run.detail)
	return run
}

// tryMutant runs mutant on tg under f (and seed), and counts a catch only
// if the run's twin — the same run without the mutant — loses nothing
// (twinClean): a violation the approach shows without the mutant too,
// a loaded machine's late worker under the naive lock or a defect of the
// approach itself, is not the mutant's.
func tryMutant(t *testing.T, infra engine.Infra, base engine.Config, mutant string, tg reach, f engine.Fault, seed uint64) mutantRun {
	run := runMutant(t, infra, base, mutant, tg, f, seed)
	if !run.caught() {
		return run
	}
	if clean, detail := twinClean(t, infra, base, tg, f, seed); !clean {
		t.Logf("%s on %s/%s under %s: its twin without the mutant lost something too: not counted (%s)", mutant, tg.scenario, tg.approach, run.faultName(), detail)
		run.violations, run.detail = 0, "a catch its twin without the mutant showed too: "+detail
	}
	return run
}

// twins caches, by run, the twins that lost nothing: a fenced twin or an
// alternative that loses nothing once without a mutant is taken to lose
// nothing in that run (TestFaults proves it run after run). The naive
// lock's twin runs every time: it keeps two clients apart only while none
// is late past its lease, which a loaded machine can make one be.
var twins sync.Map // twinKey → struct{}

type twinKey struct {
	tg   reach
	f    engine.Fault
	seed uint64
	d    time.Duration
}

// twinClean runs tg under f (and seed) without a mutant, unless a clean
// twin of it is known, and reports whether it lost nothing, with what it
// lost.
func twinClean(t *testing.T, infra engine.Infra, base engine.Config, tg reach, f engine.Fault, seed uint64) (bool, string) {
	k := twinKey{reach{scenario: tg.scenario, approach: tg.approach}, f, seed, base.Duration}
	if _, ok := twins.Load(k); ok && tg.approach != engine.NaiveLock {
		return true, ""
	}
	twin := runMutant(t, infra, base, "", tg, f, seed)
	if !twin.checked || twin.violations > 0 {
		return false, fmt.Sprintf("%d violations (checked %v): %s", twin.violations, twin.checked, twin.detail)
	}
	twins.Store(k, struct{}{})
	return true, ""
}

// rate runs the run that caught row's mutant again, until it has run
// mutantsRate times in all, and counts the catches: a scenario's run (with
// its twin), or the package test with the mutant and without. A mutant no
// run caught is not run again.
func rate(t *testing.T, infra engine.Infra, base engine.Config, row *mutantRun) {
	row.runs = 1
	if !row.caught() {
		return
	}
	row.catches = 1
	for ; row.runs < *mutantsRate; row.runs++ {
		caught := false
		if row.test != nil {
			passed, fails := runPackageTest(t, row.mutant, row.test.packageTest)
			caught = passed && fails
		} else {
			tg := reach{scenario: row.scenario, approach: row.approach}
			b := base
			if row.fault == engine.Random {
				b.Duration = row.random.duration
			}
			run := tryMutant(t, infra, b, row.mutant, tg, row.fault, row.seed)
			if !run.caught() && run.err != nil {
				// A run that could not be made (its fault never took
				// effect, its workers not ready in time on a loaded
				// machine) tried nothing: it is made once more.
				t.Logf("%s: run %d of %s/%s under %s could not be made (%v): once more", row.mutant, row.runs+1, row.scenario, row.approach, row.faultName(), run.err)
				run = tryMutant(t, infra, b, row.mutant, tg, row.fault, row.seed)
			}
			caught = run.caught()
		}
		if caught {
			row.catches++
		}
	}
}

// mutantDefects are defects a review found in paths no fixed trial was
// written for, fixed, then re-created as mutant sites: when random
// schedules are played (-mutants-random), each gets defectSeeds seeds at
// least, and one must find it — the proof that a random hunt finds what
// nobody predicted. make test plays none (each defect's fixed trial
// catches it, now that the workloads are hostile); scripts/results.sh does.
var mutantDefects = map[string]string{
	"kafkawriter.consumer.batch-retry.lost-commit": "a batch applied twice after a lost COMMIT answer in its retry one message at a time",
	"idempotency.middleware.lost-response":         "a response over the limit answered \"retry\" and its key released: a retry runs the work again",
	"partition.forward.slow-body":                  "a slow request body read on the partition's executor, holding up its other keys",
}

// defectSeeds is how many seeds of random schedules each defect of
// mutantDefects gets, each run lasting defectDuration: the defects need
// a fault and a hostile request to meet (the batch-retry defect showed in
// 8 of seeds 1 to 20 of 20 s runs of compare, the first at seed 3).
const (
	defectSeeds    = 20
	defectDuration = 20 * time.Second
)

// randomHunt plays random fault schedules, seeds 1, 2, … (-mutants-random,
// defectSeeds for a defect), on the first approach that reaches row's
// mutant (targets), plays them and loses nothing under them without it, until one
// catches it (with its twin: the same seed without the mutant), and keeps
// what it found in row.random. A mutant the fixed trials missed becomes
// that run's catch. The naive lock is not tried: it loses updates under
// every schedule, twin or not.
func randomHunt(t *testing.T, infra engine.Infra, base engine.Config, row *mutantRun, targets []reach) {
	seeds, d := *mutantsRandom, *mutantsRandomDuration
	if seeds == 0 {
		return
	}
	if _, defect := mutantDefects[row.mutant]; defect {
		seeds, d = max(seeds, defectSeeds), max(d, defectDuration)
	}
	i := slices.IndexFunc(targets, func(r reach) bool {
		return r.approach != engine.NaiveLock && r.approach != engine.Raw && playsRandom(r)
	})
	if row.caught() && row.approach != engine.NaiveLock && playsRandom(reach{scenario: row.scenario, approach: row.approach}) {
		i = slices.IndexFunc(targets, func(r reach) bool { return r.scenario == row.scenario && r.approach == row.approach })
	}
	if i < 0 {
		return
	}
	rc := &randomCatch{duration: d}
	row.random = rc
	b := base
	b.Duration = d
	start := time.Now()
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		rc.tried = seed
		run := tryMutant(t, infra, b, row.mutant, targets[i], engine.Random, seed)
		if !run.caught() {
			continue
		}
		rc.seed, rc.seconds = seed, time.Since(start).Seconds()
		if !row.caught() {
			run.random = rc
			*row = run
		}
		return
	}
}

// playsRandom: tg's approach runs under random schedules (the coalescing
// alternative, its clients sharing processes, does not: engine.FaultSkip).
func playsRandom(tg reach) bool {
	for _, d := range engine.Approaches(tg.scenario) {
		if d.Approach() == tg.approach {
			return engine.FaultSkip(engine.Random, d) == ""
		}
	}
	return false
}

// randomCell is the table's "found by a random schedule" cell.
func (m mutantRun) randomCell() string {
	switch rc := m.random; {
	case rc == nil:
		return "—"
	case rc.seed == 0:
		return fmt.Sprintf("none in %d seeds × %v", rc.tried, rc.duration)
	default:
		return fmt.Sprintf("seed %d, %.0f s", rc.seed, rc.seconds)
	}
}

// steady: every run of the catching run caught the mutant.
func (m mutantRun) steady() bool { return m.catches == m.runs }

// protection is the lease that protects a stopped client of tg's approach.
func protection(tg reach, cfg engine.Config) time.Duration {
	for _, d := range engine.Approaches(tg.scenario) {
		if d.Approach() == tg.approach {
			return d.Protection(engine.Params{Sizes: engine.Sizes{Keys: cfg.Keys, Clients: cfg.Clients}, LeaseTTL: cfg.LeaseTTL}).Lease
		}
	}
	return 0
}

func (m mutantRun) faultName() string {
	switch m.fault {
	case "":
		return "none"
	case engine.Random:
		return fmt.Sprintf("random, seed %d", m.seed)
	}
	return string(m.fault)
}

func (m mutantRun) verdict() string {
	if why, ok := mutantHoles[m.mutant]; ok && !m.caught() {
		return "HOLE: " + why
	}
	if why, ok := mutantUnsteady[m.mutant]; ok {
		if m.caught() {
			return fmt.Sprintf("unsteady, caught in %d of %d runs: %s", m.catches, m.runs, why)
		}
		return "HOLE in this run; unsteady: " + why
	}
	switch {
	case m.caught() && m.runs > 0 && !m.steady():
		return fmt.Sprintf("unsteady: caught in %d of %d runs", m.catches, m.runs)
	case m.test != nil && m.scenarioCaught:
		return fmt.Sprintf("listed as out of every scenario's reach (%s), but caught by %s/%s under %s", m.test.why, m.scenario, m.approach, m.faultName())
	case m.test != nil && !m.passedWithout:
		return "HOLE: its package test fails without the mutant too"
	case m.test != nil && !m.fails:
		return "HOLE: its package test passes with the mutant on"
	case m.test != nil && m.scenario != "":
		return fmt.Sprintf("caught by its package test, not by a scenario (%s; no run of its hunt caught it, the last on %s/%s under %s)", m.test.why, m.scenario, m.approach, m.faultName())
	case m.test != nil:
		return "caught by its package test, not by a scenario (" + string(m.test.why) + ")"
	case m.scenario == "":
		return "HOLE: no approach of mutantTrials reaches its site"
	case m.caught() && strings.Contains(m.mutant, ","):
		return "caught with every layer off (mutantLayers)"
	case m.caught() && m.fault == engine.Random:
		return "caught by a random schedule only"
	case m.caught():
		return "caught"
	case m.hits == 0:
		return "HOLE: reached without it, not with it on"
	default:
		return "HOLE: reached, never caught"
	}
}

// mutantMarkdown is the table of the runs: one row per mutant.
// mutantTrialsLine says, from mutantTrials and the runs' configuration,
// which runs a mutant is tried in, in order, for the table's reader.
func mutantTrialsLine(base engine.Config) string {
	var trials []string
	for _, tr := range mutantTrials {
		f := "no fault"
		if tr.fault != "" {
			f = "`" + string(tr.fault) + "`"
		}
		trials = append(trials, fmt.Sprintf("`%s` under %s", tr.approach, f))
	}
	return fmt.Sprintf("Each mutant is tried with %d workers, %d key, %s (under a fault: four of the approach's leases, when longer, and until the fault took effect twice), in these runs, in order, until one shows violations: %s. "+
		"The %d mutants of mutantCatchers first try the run that caught them before. "+
		"A catch counts only if the same run without the mutant (its twin) loses nothing. "+
		"The run that caught a mutant runs %d times in all (-mutants-rate): \"caught in\" counts its catches (a run that could not be made is made once more), and one short of all is unsteady, a failure. "+
		"Random schedules (`--faults random`, %v each) play seeds 1 to %d on the first approach that reaches the site and runs under them (-mutants-random; %d of %v for the re-created defects: %s) until one catches it.",
		base.Clients, base.Keys, base.Duration, strings.Join(trials, ", "), len(mutantCatchers), *mutantsRate,
		*mutantsRandomDuration, *mutantsRandom, max(*mutantsRandom, defectSeeds), max(*mutantsRandomDuration, defectDuration),
		strings.Join(slices.Sorted(maps.Keys(mutantDefects)), ", "))
}

func mutantMarkdown(rows []mutantRun) string {
	var b strings.Builder
	b.WriteString("| mutant | what it does | scenario | approach | fault | violations | site hits | caught in | found by a random schedule (seed, seconds) | verdict |\n")
	b.WriteString("|---|---|---|---|---|--:|--:|--:|---|---|\n")
	for _, r := range rows {
		v := "—"
		if r.checked {
			v = fmt.Sprint(r.violations)
		}
		if kinds, _, ok := strings.Cut(r.detail, "; first"); ok && r.violations > 0 {
			v = kinds // "3 lost update, 1 phantom": what the check found
		}
		sc, ap, f, hits := "—", "—", "—", fmt.Sprint(r.hits)
		switch {
		case r.test != nil:
			sc, ap, hits = fmt.Sprintf("package test `%s` (`%s`)", r.test.name, r.test.pkg), r.test.where(), "—"
			v = "fails"
			if !r.fails {
				v = "passes"
			}
		case r.scenario != "":
			sc, ap, f = r.scenario, string(r.approach), r.faultName()
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s | %d of %d | %s | %s |\n", r.mutant, r.doc, sc, ap, f, v, hits, r.catches, r.runs, r.randomCell(), r.verdict())
	}
	return b.String()
}

// packageTest is a test of a library package, by its package and its name
// (a test and its subtests, slash-separated).
type packageTest struct{ pkg, name string }

// outOfReach says why no scenario can reach a mutant: the workers are
// processes, and the harness's faults act on them — stop one, stall it at a
// point, hold its traffic, restart the server — never inside a statement
// the server runs, nor inside one process's memory that no other shares.
type outOfReach string

const (
	// inMemory: the site is in memory backends alone (memory.go files),
	// whose state no two workers share.
	inMemory outOfReach = "a memory backend's site"
	// inOneStatement: the race the mutant opens lies inside one SQL
	// statement, between two of its steps, with only another session's
	// open transaction able to act in between.
	inOneStatement outOfReach = "a race inside one statement"
	// inMiddleware: the site is in an HTTP middleware alone
	// (middleware.go files), which no scenario's worker serves through.
	inMiddleware outOfReach = "an HTTP middleware's site"
	// inDescheduling: the race lies between a statement's execution and
	// its commit, and opens only when the server deschedules that
	// statement's backend for most of a lease: no fault of the harness
	// does, a loaded machine now and then does.
	inDescheduling outOfReach = "a statement descheduled before its commit"
)

// siteFiles are the files a site of each kind may be in, and nowhere else.
var siteFiles = map[outOfReach]string{inMemory: "memory.go", inMiddleware: "middleware.go"}

// packageCatcher is a site out of every scenario's reach, with the package
// test that guards it and why no scenario reaches it.
type packageCatcher struct {
	packageTest
	why outOfReach
}

// where says what runs the package test, for the table.
func (c packageCatcher) where() string {
	if f, ok := siteFiles[c.why]; ok {
		return "in-process (" + f + ")"
	}
	return "sessions driven step by step (postgres.go)"
}

// packageCatchers are the mutant sites out of every process fault's reach,
// each with the package test that guards it and why: each is caught only
// if its package test, run in a test binary built with the mutants and
// $LOCKFREE_MUTANTS naming it, fails — and passes without it. TestMutants
// fails on a listed site a scenario may reach: one of inMemory (or
// inMiddleware) whose site is in a file other than memory.go (or
// middleware.go), and one of inOneStatement that a run
// of its hunt (the scenarios', as for any mutant, but on the naive lock)
// catches.
var packageCatchers = map[string]packageCatcher{
	"occ.fenced.read.stamp":   {packageTest{"./occ", "TestGuards/occ.fenced.read.stamp/memory"}, inMemory},
	"occ.fenced.write.token":  {packageTest{"./occ", "TestGuards/occ.fenced.write.token/memory"}, inMemory},
	"fencedlock.gate.compare": {packageTest{"./fencedlock", "TestGuards/fencedlock.gate.compare"}, inMemory},
	// A fresh row's mint and its insert are one statement (sqlAcquireInsert,
	// sqlAcquire's fresh-row branch), which waits only on another
	// session's uncommitted row of the same name: the mutant shows only
	// when that session's transaction, which holds the purge lock, gives
	// the name a tenure with a newer token and purges its row before it
	// commits (checkPurgeFence builds it). A user can do that with the
	// public API (Postgres.WithDB on an open transaction: Purge, Acquire,
	// Release, Acquire, Release, Purge), but no workload of a scenario
	// does, and no fault can open the race otherwise: a whole tenure —
	// insert, release, purge, each committed — would have to fit between
	// one statement's mint and its insert.
	"fencedlock.acquire.purge-fence": {packageTest{"./fencedlock", "TestGuards/fencedlock.acquire.purge-fence/insert"}, inOneStatement},
	// A claim that reads an owner's lease misses a heartbeat that judged
	// it live and commits after the claim's snapshot: found by
	// TestFaults/accounts on a loaded machine (overlapping ownerships),
	// never on a quiet one. Its package test stages the late commit with
	// a heartbeat in an open transaction.
	"partition.claim.lapse": {packageTest{"./partition", "TestGuards/partition.claim.lapse"}, inDescheduling},
}

// outOfReachNotes are the notes under the table, one for each kind of
// site caught by a package test.
var outOfReachNotes = map[outOfReach]string{
	inMemory: "A mutant whose site is in memory backends only (a `memory.go`) is out of every scenario's reach: " +
		"the workers are processes that share nothing but PostgreSQL, Kafka and Redis. It is caught, not by a scenario, when the package test named in its row, " +
		"run with the mutant built in and turned on by `$LOCKFREE_MUTANTS`, fails, and passes with it off; " +
		"TestMutants checks that each such site is in `memory.go` files alone.",
	inMiddleware: "A mutant whose site is in an HTTP middleware only (a `middleware.go`) on a path no scenario's service takes is out of every scenario's reach. It is caught, not by a scenario, when the package test named in its row, " +
		"run with the mutant built in and turned on by `$LOCKFREE_MUTANTS`, fails, and passes with it off; " +
		"TestMutants checks that each such site is in `middleware.go` files alone.",
	inOneStatement: "A mutant whose race lies inside one SQL statement (`fencedlock.acquire.purge-fence`: a fresh row's token minted, then its insert waiting on " +
		"another session's uncommitted row of the name) is out of every process fault's reach: only that other session's own transaction can act in between, " +
		"by giving the name a newer tenure and purging it before it commits, which no scenario's workload does. It is caught, not by a scenario, when the package test " +
		"named in its row, which drives the two sessions step by step, fails with the mutant on and passes with it off; TestMutants also hunts it with the scenarios, " +
		"as any other mutant but on the naive lock (which cannot see a token's order, and loses updates without a mutant on a loaded machine), " +
		"and fails if a run catches it (the row's verdict names the last run tried).",
	inDescheduling: "A mutant whose race lies between a statement's execution and its commit (`partition.claim.lapse`: a heartbeat that judged " +
		"its lease live commits after a claim read that lease as lapsed) opens only when the server deschedules a backend for most of a lease. " +
		"No fault of the harness acts inside a statement; a loaded machine does now and then, so a scenario's catch would be the load's, " +
		"not the proof's, and TestMutants does not hunt it with the scenarios. It is caught when the package test named in its row, which holds " +
		"the heartbeat's transaction open while the claim runs, fails with the mutant on and passes with it off.",
}

// catchInPackage runs c's package test with mutant and without (runPackageTest),
// after checking that no scenario reaches the site: a site inMemory or
// inMiddleware must be in memory.go or middleware.go files alone, and a site
// inOneStatement is hunted with the
// scenarios, as any other mutant but on the naive lock, whose runs must not
// catch it.
func catchInPackage(t *testing.T, infra engine.Infra, base engine.Config, mutant string, c packageCatcher, reached map[string][]reach) mutantRun {
	run := mutantRun{mutant: mutant}
	switch c.why {
	case inMemory, inMiddleware:
		root := moduleRoot(t)
		want := siteFiles[c.why]
		if files := mutantFiles(t, root, mutant); len(files) == 0 || slices.ContainsFunc(files, func(f string) bool { return filepath.Base(f) != want }) {
			t.Errorf("%s is listed in packageCatchers as %s, but its site is in %v: only a site in %s files alone is out of the scenarios' reach", mutant, c.why, files, want)
			return run
		}
	case inOneStatement:
		// Not on the naive lock: what such a race breaks is a token's
		// order, which only a fence or the exclusivity check can see, and
		// the naive lock without faults loses updates on a loaded machine
		// whenever a worker is descheduled past its lease — a catch there
		// would not be the mutant's.
		passes := targetsOf(reached, mutant)
		for i := range passes {
			passes[i] = slices.DeleteFunc(slices.Clone(passes[i]), func(r reach) bool { return r.approach == engine.NaiveLock })
		}
		run = huntMutant(t, infra, base, mutant, passes...)
		run.scenarioCaught = run.caught()
	}
	run.test = &c
	run.passedWithout, run.fails = runPackageTest(t, mutant, c.packageTest)
	return run
}

// runPackageTest runs pt in a test binary built with the mutants, first
// without mutant and then with $LOCKFREE_MUTANTS naming it, and reports
// whether it passed without it and failed with it.
func runPackageTest(t *testing.T, mutant string, pt packageTest) (passedWithout, fails bool) {
	root := moduleRoot(t)
	var pattern []string
	for _, part := range strings.Split(pt.name, "/") {
		pattern = append(pattern, "^"+regexp.QuoteMeta(part)+"$")
	}
	goTest := func(mutants string) (passed, failed bool) {
		cmd := exec.Command("go", "test", "-count=1", "-v", "-tags", "lockfree_mutants", "-run", strings.Join(pattern, "/"), pt.pkg)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "LOCKFREE_MUTANTS="+mutants)
		out, err := cmd.CombinedOutput()
		passed = err == nil && strings.Contains(string(out), "--- PASS: "+pt.name+" ")
		failed = err != nil && strings.Contains(string(out), "--- FAIL: "+pt.name+" ")
		t.Logf("%s (%s) with LOCKFREE_MUTANTS=%q: err %v\n%s", pt.name, pt.pkg, mutants, err, out)
		return passed, failed
	}
	passedWithout, _ = goTest("")
	_, fails = goTest(mutant)
	return passedWithout, fails
}

// moduleRoot is the directory of the library module, whose packages hold
// the mutant sites: the repository's root, where go.work ties the lab's
// module to it.
func moduleRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		t.Fatalf("go env GOWORK: %v", err)
	}
	work := strings.TrimSpace(string(out))
	if work == "" || work == "off" {
		t.Fatal("TestMutants runs the library's package tests from the repository's go.work: run it without GOWORK=off")
	}
	return filepath.Dir(work)
}

// mutantFiles lists the Go files of the module, tests aside, that hold
// mutant's site.
func mutantFiles(t *testing.T, root, mutant string) []string {
	// The call is spelled in two pieces, so that the registry test does not
	// take this line for a site.
	site := []byte("failpoint." + "Mutant(" + strconv.Quote(mutant) + ")")
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err == nil && bytes.Contains(src, site) {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// mutantUnsteady are the mutants the hunt catches in some runs and not in
// others, each with why: TestMutants fails on neither outcome, and the
// table shows which it was. Each is a hole in the proof until a scenario
// catches it every time.
var mutantUnsteady = map[string]string{}

// mutantHoles are the mutants no scenario catches yet, each with why: the
// holes in the proof that remain to be closed with a sharper scenario.
// TestMutants fails on a hole missing here and on one listed here that a
// run catches, so the list cannot drift from what the runs show.
var mutantHoles = map[string]string{}
