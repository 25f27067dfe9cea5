//go:build lockfree_mutants

package kafkawriter_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// Each safety condition's mutant makes the check that guards it see the
// violation: the guard tests can fail. The mutants are process-wide, so
// this test is not parallel: Go runs it before any parallel test resumes.
func TestMutantsAreCaught(t *testing.T) {
	for _, g := range guards() {
		t.Run(g.name, func(t *testing.T) {
			before := make([]int64, len(g.mutants))
			for i, name := range g.mutants {
				before[i] = failpoint.Hits(name)
				defer failpoint.EnableMutant(name)()
			}
			err := g.check(t)
			if err == nil {
				t.Fatalf("with %v on, the check saw no violation", g.mutants)
			}
			for i, name := range g.mutants {
				if failpoint.Hits(name) == before[i] {
					t.Fatalf("the check never reached %s", name)
				}
			}
			t.Logf("caught: %v", err)
		})
	}
}
