//go:build lockfree_mutants

package idempotency_test

import (
	"strings"
	"testing"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// Each safety condition's mutant makes the check that guards it see the
// violation: the guard tests can fail. The mutants are process-wide, so
// these subtests run one at a time and not beside TestGuards' (run this
// build with -run TestMutantsAreCaught, as make test-mutants does).
func TestMutantsAreCaught(t *testing.T) {
	for _, g := range guards() {
		name, _, _ := strings.Cut(g.mutant, "/")
		t.Run(g.mutant, func(t *testing.T) {
			before := failpoint.Hits(name)
			disable := failpoint.EnableMutant(name)
			err := g.check(t)
			disable()
			if err == nil {
				t.Fatalf("with %s on, the check saw no violation", name)
			}
			if failpoint.Hits(name) == before {
				t.Fatalf("the check never reached %s", name)
			}
			t.Logf("caught: %v", err)
		})
	}
}
