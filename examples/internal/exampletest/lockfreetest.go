package exampletest

import (
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
)

// Judge fails t unless rep, a lockfreetest run of the example's code named
// name under Pause, shows what the example claims: a pause took effect and
// the history was checked to the end; wrong code (the naive lock) broke
// what the check holds, right code did not; and the fenced lock refused a
// write, so its fence acted.
func Judge[I, O any](t *testing.T, name string, wrong bool, rep *lockfreetest.Report[I, O]) {
	t.Helper()
	switch {
	case rep.Faults[lockfreetest.Pause] == 0 || !rep.Checked:
		t.Fatalf("%s: no pause took effect, or not checked: %s", name, rep.Summary())
	case wrong && len(rep.Violations) == 0:
		t.Fatalf("%s: %s; want a violation", name, rep.Summary())
	case !wrong && len(rep.Violations) > 0:
		t.Fatalf("%s: %s: %q", name, rep.Summary(), rep.Violations)
	}
	if wrong {
		t.Log(rep.Violations[0])
	}
	if refused := rep.History.Count(lockfreetest.Fail, ""); name == "fenced" && refused == 0 {
		t.Fatalf("fenced: %s; no write refused: the fence never acted", rep.Summary())
	}
}
