//go:build !lockfree_mutants

package failpoint_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// In a default build no mutant can be on, whatever the environment says.
func TestMutantsOffByDefault(t *testing.T) {
	t.Setenv("LOCKFREE_MUTANTS", "fencedlock.gate.compare")
	for _, p := range failpoint.Registered() {
		if failpoint.Mutant(p.Name) {
			t.Errorf("%s is on in a default build", p.Name)
		}
	}
}
