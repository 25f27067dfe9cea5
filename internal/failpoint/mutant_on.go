//go:build lockfree_mutants

package failpoint

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// MutantsBuilt reports whether this build has the lockfree_mutants tag.
const MutantsBuilt = true

var (
	mutantsMu sync.RWMutex
	mutants   = fromEnv(os.Getenv("LOCKFREE_MUTANTS"))
)

func fromEnv(v string) map[string]bool {
	m := map[string]bool{}
	for _, name := range strings.Split(v, ",") {
		if name = strings.TrimSpace(name); name != "" {
			m[name] = true
		}
	}
	return m
}

// Mutant reports whether the unsafe variant name is enabled, by
// $LOCKFREE_MUTANTS or EnableMutant, and counts the hit.
func Mutant(name string) bool {
	if c := counters[name]; c != nil {
		c.Add(1)
	}
	mutantsMu.RLock()
	defer mutantsMu.RUnlock()
	return mutants[name]
}

// EnableMutant turns the unsafe variant name on for the whole process and
// returns a function that turns it off again. It panics on a name that is
// not a registered mutant site: a typo would otherwise test nothing.
func EnableMutant(name string) (disable func()) {
	if !isMutant(name) {
		panic(fmt.Sprintf("failpoint: %q is not a registered mutant", name))
	}
	mutantsMu.Lock()
	defer mutantsMu.Unlock()
	mutants[name] = true
	return func() {
		mutantsMu.Lock()
		defer mutantsMu.Unlock()
		delete(mutants, name)
	}
}

func isMutant(name string) bool {
	for _, p := range registry {
		if p.Name == name && p.Kind == MutantSite {
			return true
		}
	}
	return false
}
