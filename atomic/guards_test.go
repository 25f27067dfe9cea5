package atomic_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lockfree-go/lockfree/atomic"
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

// storeKinds builds each implementation a condition is checked on: the
// memory backend, the PostgreSQL backend, and the fenced twin (memory locks,
// PostgreSQL table). Each check gets a fresh table.
var storeKinds = map[string]func(t *testing.T) atomic.Store{
	"memory":   func(t *testing.T) atomic.Store { return newMemory(t, 0) },
	"postgres": func(t *testing.T) atomic.Store { return newPostgres(t, newTable(t).Pool, inventory) },
	"fenced": func(t *testing.T) atomic.Store {
		return newFenced(t, memoryLocks(nil), newTable(t).Pool, inventory, nil)
	},
}

func guards() []guard {
	var gs []guard
	for _, c := range []struct {
		mutant string
		check  func(t *testing.T, s atomic.Store) error
		kinds  []string
	}{
		{"atomic.decrement.floor", checkFloor, []string{"memory", "postgres", "fenced"}},
		{"atomic.increment.cap", checkCap, []string{"memory", "postgres", "fenced"}},
		{"atomic.cas.compare", checkCompareAndSet, []string{"memory", "postgres", "fenced"}},
		{"atomic.setifgreater.compare", checkSetIfGreater, []string{"memory", "postgres", "fenced"}},
		// The twin's claim and batch are guarded by its lock and its
		// transaction, not by a condition of its own.
		{"atomic.claim.conflict", checkClaimOnce, []string{"memory", "postgres"}},
		{"atomic.decrementmany.all", checkBatchAllOrNothing, []string{"memory", "postgres"}},
	} {
		for _, kind := range c.kinds {
			gs = append(gs, guard{c.mutant + "/" + kind, func(t *testing.T) error { return c.check(t, storeKinds[kind](t)) }})
		}
	}
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
	gs = append(gs, guard{"atomic.refusal.recheck/postgres", checkRefusalRecheck})
	for _, kind := range []string{"memory", "postgres"} {
		serial := func(t *testing.T) error { return checkCoalescerSerial(t, inOrderKinds[kind](t)) }
		gs = append(gs,
			guard{"atomic.decrement.floor/in-order-" + kind, serial},
			guard{"atomic.increment.cap/in-order-" + kind, serial},
			guard{"atomic.cas.compare/in-order-" + kind, serial},
			guard{"atomic.setifgreater.compare/in-order-" + kind, serial},
			guard{"atomic.decrementmany.all/in-order-" + kind, serial},
			guard{"atomic.coalescer.order/" + kind, serial},
			guard{"atomic.coalescer.in-flight/" + kind, func(t *testing.T) error { return checkCoalescerInFlight(t, inOrderKinds[kind](t)) }},
		)
	}
	gs = append(gs, guard{"atomic.inorder.uncertain/postgres", checkCoalescerLostReply})
	return append(gs, idGuards()...)
}

// refused returns a violation when the operation that returned err was
// accepted or changed key (value is what a refusal leaves), and fails the
// test when it was refused for another reason than want.
func refused(t *testing.T, s atomic.Store, what string, err, want error, key string, value int64) error {
	t.Helper()
	v, verr := s.Value(ctx, key)
	switch {
	case verr != nil:
		t.Fatal(verr)
	case err == nil || v != value:
		return fmt.Errorf("%s: %v, value %d, want a refusal leaving %d", what, err, v, value)
	case !errors.Is(err, want):
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
	return nil
}

// checkFloor guards Decrement's floor.
func checkFloor(t *testing.T, s atomic.Store) error {
	claim(t, s, "floor", 1)
	_, err := s.Decrement(ctx, "floor", 2)
	return refused(t, s, "decrement of 2 from 1 (floor 0)", err, atomic.ErrInsufficient, "floor", 1)
}

// checkCap guards Increment's cap.
func checkCap(t *testing.T, s atomic.Store) error {
	claim(t, s, "cap", 5)
	_, err := s.Increment(ctx, "cap", 3, 7)
	return refused(t, s, "increment of 5 by 3 (cap 7)", err, atomic.ErrInsufficient, "cap", 5)
}

// checkCompareAndSet guards CompareAndSet's comparison.
func checkCompareAndSet(t *testing.T, s atomic.Store) error {
	claim(t, s, "cas", 1)
	err := s.CompareAndSet(ctx, "cas", 2, 9)
	return refused(t, s, "compare-and-set 2 → 9 of 1", err, atomic.ErrConflict, "cas", 1)
}

// checkSetIfGreater guards SetIfGreater's comparison, equal values included.
func checkSetIfGreater(t *testing.T, s atomic.Store) error {
	claim(t, s, "mark", 5)
	for _, v := range []int64{3, 5} {
		err := s.SetIfGreater(ctx, "mark", v)
		if err := refused(t, s, fmt.Sprintf("set-if-greater %d over 5", v), err, atomic.ErrConflict, "mark", 5); err != nil {
			return err
		}
	}
	return nil
}

// checkClaimOnce guards Claim's conflict.
func checkClaimOnce(t *testing.T, s atomic.Store) error {
	claim(t, s, "coupon", 7)
	err := s.Claim(ctx, "coupon", 9)
	return refused(t, s, "second claim", err, atomic.ErrConflict, "coupon", 7)
}

// checkBatchAllOrNothing guards DecrementMany's all or nothing: a batch
// with a short key changes none.
func checkBatchAllOrNothing(t *testing.T, s atomic.Store) error {
	claim(t, s, "a", 5)
	claim(t, s, "c", 1)
	_, err := s.DecrementMany(ctx, map[string]int64{"a": 2, "c": 2})
	return refused(t, s, "batch with c short", err, atomic.ErrInsufficient, "a", 5)
}

func claim(t *testing.T, s atomic.Store, key string, v int64) {
	t.Helper()
	if err := s.Claim(ctx, key, v); err != nil {
		t.Fatal(err)
	}
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
