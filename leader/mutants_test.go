//go:build lockfree_mutants

package leader_test

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
			failpoint.RequireCaught(t, func() error { return g.check(t) }, name)
		})
	}
}
