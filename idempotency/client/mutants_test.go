//go:build lockfree_mutants

package client_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// Each safety condition's mutant makes the check that guards it see the
// violation: the guard tests can fail. The mutants are process-wide, so
// these subtests run one at a time, and this test is not parallel.
func TestMutantsAreCaught(t *testing.T) {
	for _, g := range guards() {
		t.Run(g.mutant, func(t *testing.T) {
			failpoint.RequireCaught(t, func() error { return g.check(t) }, g.mutant)
		})
	}
}
