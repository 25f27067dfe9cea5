package engine_test

import (
	"flag"
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

// faultTable renders the table of the faults from the registry: each
// fault's name, whom it hits, whether a stale write lands under it, the
// scenarios it takes effect in, and how it is injected.
func faultTable() string {
	var b strings.Builder
	b.WriteString("| fault | hits | a stale write lands | takes effect in | injected as |\n|---|---|---|---|---|\n")
	scenarios := engine.Names()
	for _, f := range engine.FaultNames() {
		hits := "one worker at a time"
		if engine.WholeRun(f) {
			hits = "every worker, the whole run"
		}
		bites := "—"
		if engine.Bites(f) {
			bites = "yes"
		}
		var in []string
		for _, sc := range scenarios {
			if engine.FaultApplies(f, sc) {
				in = append(in, "`"+sc+"`")
			}
		}
		where := strings.Join(in, ", ")
		if len(in) == len(scenarios) {
			where = "every scenario"
		}
		b.WriteString("| `" + string(f) + "` | " + hits + " | " + bites + " | " + where + " | " + engine.FaultHow(f) + " |\n")
	}
	return b.String()
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
// order the CLI lists them, with its traits and its phrase.
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
