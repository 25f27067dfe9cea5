//go:build lockfree_mutants

package outbox_test

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
			failpoint.RequireCaught(t, func() error { return g.check(t) }, g.mutants...)
		})
	}
}
