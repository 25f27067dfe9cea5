//go:build lockfree_mutants

package harness_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/harness"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/internal/testkafka"
)

var mutantsTable = flag.String("mutants-table", "", "TestMutants writes its table (Markdown) to this file")

// mutantTrials are the approaches a mutant is tried on, each under the
// faults it loses nothing under without a mutant (TestFaults, and the
// fault-free runs of reachedSites), so that a violation is the mutant's: the
// alternative and the fenced lock under a pause past the lease (it catches a
// missing fence and, with the clients' contention, a missing condition),
// then under the late delivery of a cut worker's write; the naive lock
// without faults, where nothing but the lock keeps two clients apart.
var mutantTrials = []struct {
	approach harness.Approach
	faults   []harness.Fault
}{
	{harness.Alternative, []harness.Fault{harness.Pause, harness.Delay}},
	{harness.FencedLock, []harness.Fault{harness.Pause, harness.Delay}},
	{harness.NaiveLock, nil},
}

// mutantRun is one run of one mutant against one scenario's approach.
type mutantRun struct {
	mutant, doc string // doc: what the mutant does, from the registry
	scenario    string
	approach    harness.Approach
	fault       harness.Fault
	violations  int64
	checked     bool
	hits        int64 // how often the workers reached the mutant's site
	err         error
}

func (m mutantRun) caught() bool { return m.checked && m.violations > 0 && m.hits > 0 }

// reach is one scenario's approach that reaches a mutant site.
type reach struct {
	scenario string
	approach harness.Approach
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
	infra := harness.Infra{URL: testdb.New(t).URL, Kafka: testkafka.Brokers(t)}
	base := harness.Config{Clients: 4, Keys: 1, Duration: 1500 * time.Millisecond}
	var notes []string
	reached := reachedSites(t, infra, base, &notes)
	var rows []mutantRun
	for _, p := range failpoint.Registered() {
		if p.Kind != failpoint.MutantSite {
			continue
		}
		row := huntMutant(t, infra, base, p.Name, reached[p.Name])
		row.doc = p.Doc
		t.Logf("%s: %s", p.Name, row.verdict())
		rows = append(rows, row)
	}
	table := mutantMarkdown(rows)
	for _, n := range notes {
		table += "\n" + n + "\n"
	}
	t.Log("\n" + table)
	if *mutantsTable != "" {
		if err := os.WriteFile(*mutantsTable, []byte(table), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows {
		_, known := mutantHoles[r.mutant]
		switch {
		case r.caught() && known:
			t.Errorf("%s is caught now (%s/%s under %s): remove it from mutantHoles", r.mutant, r.scenario, r.approach, r.faultName())
		case !r.caught() && !known:
			t.Errorf("%s: no scenario catches it: a hole in the proof (%s)", r.mutant, r.verdict())
		}
	}
}

// reachedSites runs each scenario's trial approaches once, without a mutant
// or a fault, and returns, per mutant site, the approaches whose workers
// reached it, the most-hit first. One that loses anything there is left out,
// with a note: its violations under a mutant would prove nothing.
func reachedSites(t *testing.T, infra harness.Infra, base harness.Config, notes *[]string) map[string][]reach {
	out := map[string][]reach{}
	for _, sc := range harness.Scenarios() {
		cfg := base
		for _, tr := range mutantTrials {
			cfg.Approaches = append(cfg.Approaches, tr.approach)
		}
		cfg.Hits = func(a harness.Approach, hits map[string]int64) {
			for name, n := range hits {
				out[name] = append(out[name], reach{scenario: sc.Name(), approach: a, hits: n})
			}
		}
		rep, err := harness.Run(context.Background(), sc, cfg, infra)
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

// huntMutant tries mutant on the approaches that reach its site, trial by
// trial, and returns the first run that catches it, or the last one tried.
func huntMutant(t *testing.T, infra harness.Infra, base harness.Config, mutant string, targets []reach) mutantRun {
	last := mutantRun{mutant: mutant}
	for _, tr := range mutantTrials {
		faults := tr.faults
		if faults == nil {
			faults = []harness.Fault{""}
		}
		for _, f := range faults {
			for _, tg := range targets {
				if tg.approach != tr.approach {
					continue
				}
				run := runMutant(t, infra, base, mutant, tg, f)
				if run.caught() {
					return run
				}
				last = run
			}
		}
	}
	return last
}

// runMutant runs tg's approach with mutant on in every worker, under f (none
// when empty).
func runMutant(t *testing.T, infra harness.Infra, base harness.Config, mutant string, tg reach, f harness.Fault) mutantRun {
	sc, _ := harness.Lookup(tg.scenario)
	cfg := base
	if f != "" {
		cfg.Faults = []harness.Fault{f}
	}
	cfg.Approaches = []harness.Approach{tg.approach}
	cfg.Env = []string{"LOCKFREE_MUTANTS=" + mutant}
	run := mutantRun{mutant: mutant, scenario: tg.scenario, approach: tg.approach, fault: f}
	cfg.Hits = func(_ harness.Approach, hits map[string]int64) { run.hits = hits[mutant] }
	rep, err := harness.Run(context.Background(), sc, cfg, infra)
	run.err = err
	for _, r := range rep.Results {
		run.violations, run.checked = r.Violations, r.Checked
	}
	t.Logf("%s on %s/%s under %s: %d violations (checked %v), site hit %d times, err %v",
		mutant, tg.scenario, tg.approach, run.faultName(), run.violations, run.checked, run.hits, err)
	return run
}

func (m mutantRun) faultName() string {
	if m.fault == "" {
		return "none"
	}
	return string(m.fault)
}

func (m mutantRun) verdict() string {
	if why, ok := mutantHoles[m.mutant]; ok && !m.caught() {
		return "HOLE: " + why
	}
	switch {
	case m.scenario == "":
		return "HOLE: no approach of mutantTrials reaches its site"
	case m.caught():
		return "caught"
	case m.hits == 0:
		return "HOLE: reached without it, not with it on"
	default:
		return "HOLE: reached, never caught"
	}
}

// mutantMarkdown is the table of the runs: one row per mutant.
func mutantMarkdown(rows []mutantRun) string {
	var b strings.Builder
	b.WriteString("| mutant | what it does | scenario | approach | fault | violations | site hits | verdict |\n")
	b.WriteString("|---|---|---|---|---|--:|--:|---|\n")
	for _, r := range rows {
		v := "—"
		if r.checked {
			v = fmt.Sprint(r.violations)
		}
		sc, ap, f := "—", "—", "—"
		if r.scenario != "" {
			sc, ap, f = r.scenario, string(r.approach), r.faultName()
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %d | %s |\n", r.mutant, r.doc, sc, ap, f, v, r.hits, r.verdict())
	}
	return b.String()
}

// mutantHoles are the mutants no scenario catches yet, each with why: the
// holes in the proof that remain to be closed with a sharper scenario.
// TestMutants fails on a hole missing here and on one listed here that a
// run catches, so the list cannot drift from what the runs show.
var mutantHoles = map[string]string{}
