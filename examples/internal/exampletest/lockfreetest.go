package exampletest

import (
	"testing"

	"github.com/lockfree-go/lockfree/cmd/lockfree/lockfreetest"
)

// Want is what a lockfreetest run of an example's code must show.
type Want int

const (
	// Violates: wrong code (the naive lock) breaks what the check holds.
	Violates Want = iota
	// Holds: right code breaks nothing.
	Holds
	// Refuses: right code breaks nothing, and refused a stale write at
	// least once (a fenced lock: its fence acted).
	Refuses
)

// Judge fails t unless rep, a lockfreetest run under Pause of the
// example's code named name, shows what want says, with a pause that took
// effect and a history checked to the end.
func Judge[I, O any](t *testing.T, name string, want Want, rep *lockfreetest.Report[I, O]) {
	t.Helper()
	switch {
	case rep.Faults[lockfreetest.Pause] == 0 || !rep.Checked:
		t.Fatalf("%s: no pause took effect, or not checked: %s", name, rep.Summary())
	case want == Violates && len(rep.Violations) == 0:
		t.Fatalf("%s: %s; want a violation", name, rep.Summary())
	case want != Violates && len(rep.Violations) > 0:
		t.Fatalf("%s: %s: %q", name, rep.Summary(), rep.Violations)
	case want == Violates:
		t.Log(rep.Violations[0])
	case want == Refuses && rep.History.Count(lockfreetest.Fail, "") == 0:
		t.Fatalf("%s: %s; no write refused: the fence never acted", name, rep.Summary())
	}
}
