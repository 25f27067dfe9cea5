package atomic_test

import (
	"testing"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The checks below are the bodies of the tests that guard each safety
// condition of the package. Each returns the violation it sees, or nil: the
// default build asserts nil (TestGuards), and the lockfree_mutants build
// turns the condition's mutant on and asserts that its check sees the
// violation (TestMutantsAreCaught), which proves the check can fail.

// guard is one check and the mutant site whose condition it guards; the
// part of mutant after a "/" names the variant (backend) and is not part of
// the site's name.
type guard struct {
	mutant string
	check  func(t *testing.T) error
}

func guards() []guard {
	var gs []guard
	for _, locks := range []string{"memory locks", "postgres locks"} {
		env := func(t *testing.T) (lockEnv, *testdb.DB) {
			db := newTable(t)
			if locks == "memory locks" {
				return memoryLockEnv(), db
			}
			return postgresLockEnv(t, db), db
		}
		gs = append(gs,
			guard{"fencedlock.fence.update.token/" + locks, func(t *testing.T) error {
				e, db := env(t)
				return checkPausedHolder(t, e, db)
			}},
			guard{"fencedlock.fence.read.stamp/" + locks, func(t *testing.T) error {
				e, db := env(t)
				return checkStampOrdersStaleHolder(t, e, db)
			}},
		)
	}
	return gs
}

func TestGuards(t *testing.T) {
	t.Parallel()
	for _, g := range guards() {
		t.Run(g.mutant, func(t *testing.T) {
			t.Parallel()
			if err := g.check(t); err != nil {
				t.Fatal(err)
			}
		})
	}
}
