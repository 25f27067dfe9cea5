//go:build lockfree_mutants

package failpoint

import "testing"

// RequireCaught turns the mutants named on, runs check, turns them off, and
// fails t unless check saw a violation (returned an error) and reached every
// mutant's site: a mutant that no run reaches proves nothing. It is the one
// body of each package's TestMutantsAreCaught. Mutants are process-wide, so
// its callers must not run beside tests that expect the safe behaviour.
func RequireCaught(t testing.TB, check func() error, names ...string) {
	t.Helper()
	before := make([]int64, len(names))
	for i, name := range names {
		before[i] = Hits(name)
		defer EnableMutant(name)()
	}
	err := check()
	if err == nil {
		t.Fatalf("with %v on, the check saw no violation", names)
	}
	for i, name := range names {
		if Hits(name) == before[i] {
			t.Fatalf("the check never reached %s", name)
		}
	}
	t.Logf("caught: %v", err)
}
