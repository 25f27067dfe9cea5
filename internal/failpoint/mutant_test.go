//go:build lockfree_mutants

package failpoint_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

func TestEnableMutant(t *testing.T) {
	const name = "fencedlock.gate.compare"
	before := failpoint.Hits(name)
	if failpoint.Mutant(name) {
		t.Fatal("mutant on before EnableMutant")
	}
	disable := failpoint.EnableMutant(name)
	if !failpoint.Mutant(name) {
		t.Fatal("mutant off after EnableMutant")
	}
	disable()
	if failpoint.Mutant(name) {
		t.Fatal("mutant on after disable")
	}
	if got := failpoint.Hits(name) - before; got != 3 {
		t.Fatalf("%d hits, want 3", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("EnableMutant of an unregistered name did not panic")
		}
	}()
	failpoint.EnableMutant("no.such.mutant")
}
