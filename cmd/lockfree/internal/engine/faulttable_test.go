package engine_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/engine"
)

var updateFaultTable = flag.Bool("update-fault-table", false, "rewrite docs/compare.md's fault table from the engine's registry")

// The markers between which docs/compare.md holds the fault table.
const (
	faultTableBegin = "<!-- faults: generated from the engine's registry; go test -run TestFaultTable ./cmd/lockfree/internal/engine -args -update-fault-table -->"
	faultTableEnd   = "<!-- /faults -->"
)

// faultTable renders the table of the faults from the registry, in the
// order the CLI lists them: each fault's name, what it does (How), whom it
// hits, whether a stale write lands under it, when it counts (counts), and
// the approaches it is skipped in, with why.
func faultTable() string {
	var b strings.Builder
	b.WriteString("| fault | what it does | to whom | a stale write lands | when it counts | skipped by |\n|---|---|---|---|---|---|\n")
	for _, f := range engine.FaultNames() {
		whom := "one worker at a time"
		switch {
		case f == engine.Random:
			whom = "the workers its schedule draws"
		case engine.WholeRun(f):
			whom = "every worker"
		}
		bites := "—"
		if engine.Bites(f) {
			bites = "yes"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s |\n", f, engine.FaultHow(f), whom, bites, engine.FaultCounts(f), skippedBy(f))
	}
	return b.String()
}

// skippedBy says in which approaches f is skipped, and why (FaultSkip):
// one entry per reason, in the registry's order. When the reason is f's
// only one and it is shorter, its approaches are "every approach but"
// those f takes effect in.
func skippedBy(f engine.Fault) string {
	var reasons []string
	skips := map[string]map[string][]engine.Approach{} // why → scenario → approaches
	runs := map[string][]engine.Approach{}             // scenario → approaches f takes effect in
	for _, sc := range engine.Names() {
		for _, d := range engine.Approaches(sc) {
			why := engine.FaultSkip(f, d)
			if why == "" {
				runs[sc] = append(runs[sc], d.Approach())
				continue
			}
			if skips[why] == nil {
				reasons = append(reasons, why)
				skips[why] = map[string][]engine.Approach{}
			}
			skips[why][sc] = append(skips[why][sc], d.Approach())
		}
	}
	var out []string
	for _, why := range reasons {
		who := approachesIn(skips[why])
		if len(reasons) == 1 {
			but := "every approach"
			if len(runs) > 0 {
				but += " but " + approachesIn(runs)
			}
			if len(but) < len(who) {
				who = but
			}
		}
		out = append(out, who+": "+why)
	}
	if len(out) == 0 {
		return "—"
	}
	return strings.Join(out, "<br>")
}

// approachesIn names the approaches of some scenarios, in the registry's
// order: "every approach of `events`" for scenarios with every approach in
// as, then "`alternative`, `raw` of `inventory`, `documents`" for each list
// of approaches, with the scenarios that share it.
func approachesIn(as map[string][]engine.Approach) string {
	var whole, lists []string
	shared := map[string][]string{} // a list of approaches → its scenarios
	for _, sc := range engine.Names() {
		a, ok := as[sc]
		switch {
		case !ok:
		case len(a) == len(engine.Approaches(sc)):
			whole = append(whole, "`"+sc+"`")
		default:
			list := "`" + strings.Join(approachNames(a), "`, `") + "`"
			if shared[list] == nil {
				lists = append(lists, list)
			}
			shared[list] = append(shared[list], "`"+sc+"`")
		}
	}
	var out []string
	if len(whole) > 0 {
		out = append(out, "every approach of "+strings.Join(whole, ", "))
	}
	for _, list := range lists {
		out = append(out, list+" of "+strings.Join(shared[list], ", "))
	}
	return strings.Join(out, "; ")
}

func approachNames(as []engine.Approach) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = string(a)
	}
	return out
}

// docsCompare is the path of docs/compare.md.
func docsCompare(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "docs", "compare.md")
}

// docs/compare.md's fault table is the registry's: every fault, in the
// order the CLI lists them, with its traits, its phrases and its skips.
func TestFaultTable(t *testing.T) {
	path := docsCompare(t)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	begin, end := slices.Index(lines, faultTableBegin), slices.Index(lines, faultTableEnd)
	if begin < 0 || end < begin {
		t.Fatalf("%s lacks the lines %q and %q around its fault table", path, faultTableBegin, faultTableEnd)
	}
	// The --faults row of the flags' table lists them too, in order.
	var names []string
	for _, f := range engine.FaultNames() {
		names = append(names, "`"+string(f)+"`")
	}
	row := "`none`, or comma-separated " + strings.Join(names, ", ") + " (below)"
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "| `--faults` |") && strings.Contains(l, row) }) {
		t.Errorf("%s: its --faults row does not list the registry's faults: want %q", path, row)
	}
	for _, f := range engine.FaultNames() {
		if engine.FaultHow(f) == "" || engine.FaultCounts(f) == "" {
			t.Errorf("fault %s: its How and counts must each say something: the table shows them", f)
		}
	}
	want := faultTable()
	got := strings.Join(lines[begin+1:end], "\n")
	if got == want {
		return
	}
	if !*updateFaultTable {
		t.Fatalf("docs/compare.md's fault table is not the registry's; run with -args -update-fault-table. Want:\n%s", want)
	}
	out := slices.Concat(lines[:begin+1], []string{strings.TrimSuffix(want, "\n"), ""}, lines[end:])
	if err := os.WriteFile(path, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}
