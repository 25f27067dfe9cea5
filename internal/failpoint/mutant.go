//go:build !lockfree_mutants

package failpoint

// MutantsBuilt reports whether this build has the lockfree_mutants tag.
const MutantsBuilt = false

// Mutant reports whether the unsafe variant name is enabled: never, in a
// build without the lockfree_mutants tag. The call is inlined to false and
// the branch it guards is removed as dead code.
func Mutant(name string) bool { return false }
