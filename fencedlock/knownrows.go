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

// insertFirst decides which statement a Postgres store sends for a name whose
// row it has not seen: the insert alone (sqlAcquireInsert), cheapest for a
// fresh name, or the statement that inserts, takes a free row or reports
// the holder (sqlAcquire), which spares an existing row's second statement.
// It keeps a score of what such names lately turned out to be, bounded so
// that it follows a change of workload within a few acquires: a fresh name
// counts for the insert, an existing row (free or held) against it. A zero
// insertFirst sends the insert. It is safe for concurrent use.
type insertFirst struct {
	score atomic.Int32 // above 0: existing rows came more often
}

// insertFirstBound bounds the score.
const insertFirstBound = 8

// insert reports whether to send the insert alone.
func (f *insertFirst) insert() bool { return f.score.Load() <= 0 }

// record counts an acquire of a name whose row the store had not seen: it
// inserted the row (fresh), or found one.
func (f *insertFirst) record(fresh bool) {
	d := int32(1)
	if fresh {
		d = -1
	}
	addBounded(&f.score, d, insertFirstBound)
}

// addBounded adds d to score, keeping it within ±bound.
func addBounded(score *atomic.Int32, d, bound int32) {
	for {
		s := score.Load()
		n := min(max(s+d, -bound), bound)
		if n == s || score.CompareAndSwap(s, n) {
			return
		}
	}
}

// heldFirst decides which statement a Postgres store sends first for a name
// whose row it has seen: the update alone (sqlAcquireUpdate), cheapest for a
// free row, or the statement that also answers a held row (sqlAcquireRow),
// which spares a held row's second statement. It keeps a score of what such
// rows lately turned out to be, bounded as insertFirst's: a held row counts
// heldFirstWeight for the statement with the answer, a free one 1 against
// it. A zero heldFirst sends the update. It is safe for concurrent use.
type heldFirst struct {
	score atomic.Int32 // above 0: held rows came more than 1 in heldFirstWeight+1
}

// heldFirstBound bounds the score.
const heldFirstBound = 8

// heldFirstWeight is what a held row weighs against a free one. The update
// first costs a held row a whole second statement and round trip (on the
// server alone, about 90 µs); the statement with the answer first costs a
// free row about 20 µs more than the update: so the answer goes first once
// more than about one attempt in five finds its row held.
const heldFirstWeight = 4

// held reports whether to send the statement that answers a held row first.
func (f *heldFirst) held() bool { return f.score.Load() > 0 }

// record counts an acquire of a name whose row the store had seen and found:
// held, or free.
func (f *heldFirst) record(held bool) {
	d := int32(-1)
	if held {
		d = heldFirstWeight
	}
	addBounded(&f.score, d, heldFirstBound)
}
