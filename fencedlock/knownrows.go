package fencedlock

import (
	"hash/maphash"
	"sync/atomic"
)

// knownRows remembers, approximately, the lock names whose row a Postgres
// store has seen, so that an acquire of such a name sends the statement
// without the fresh-row branch. It is a direct-mapped table of name hashes:
// bounded, lock-free, and forgetful (a name evicts another that maps to its
// slot). A wrong answer costs one round trip, never safety: the statement
// without the fresh-row branch takes only an existing row, and finds no row
// when there is none. It is safe for concurrent use.
type knownRows struct {
	seed  maphash.Seed
	slots [4096]atomic.Uint64
}

func newKnownRows() *knownRows { return &knownRows{seed: maphash.MakeSeed()} }

// slot returns the slot of name and the value that marks name there.
func (k *knownRows) slot(name string) (*atomic.Uint64, uint64) {
	h := maphash.String(k.seed, name)
	return &k.slots[h%uint64(len(k.slots))], h | 1 // 0 marks an empty slot
}

func (k *knownRows) has(name string) bool {
	s, h := k.slot(name)
	return s.Load() == h
}

func (k *knownRows) add(name string) {
	s, h := k.slot(name)
	s.Store(h)
}

func (k *knownRows) forget(name string) {
	s, h := k.slot(name)
	s.CompareAndSwap(h, 0)
}
