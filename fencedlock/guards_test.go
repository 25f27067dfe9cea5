package fencedlock_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The checks below are the bodies of the tests that guard each safety
// condition of the package. Each returns the violation it sees, or nil: the
// default build asserts nil (TestGuards), and the lockfree_mutants build
// turns each condition's mutant on and asserts that its check sees the
// violation (TestMutantsAreCaught), which proves the check can fail.

// lockEnv is a store whose leases a check can let expire.
type lockEnv struct {
	store fencedlock.Store
	ttl   time.Duration // a lease short enough to expire in a test
	// expire lets lease expire and returns once the store agrees.
	expire func(t *testing.T, lease fencedlock.Lease)
	db     *testdb.DB // nil for memory
}

func memoryEnv(t *testing.T) lockEnv {
	c := &clock.Manual{}
	return lockEnv{store: newMemory(t, c), ttl: time.Second, expire: func(*testing.T, fencedlock.Lease) { c.Advance(2 * time.Second) }}
}

func postgresEnv(t *testing.T) lockEnv {
	db := testdb.New(t, fencedlock.Migrations()...)
	store := newPostgres(t, db, false)
	return lockEnv{store: store, ttl: 300 * time.Millisecond, db: db, expire: func(t *testing.T, l fencedlock.Lease) {
		waitFor(t, 30*time.Second, func() bool {
			cur, held, err := store.Holder(ctx, l.Name)
			return err == nil && (!held || cur.Token != l.Token)
		})
	}}
}

// supersede acquires name for "a", lets the lease expire, and acquires it
// for "b": a is the stale tenure, b the current one.
func supersede(t *testing.T, e lockEnv, name string) (a, b fencedlock.Lease) {
	t.Helper()
	a, err := e.store.Acquire(ctx, name, "a", e.ttl)
	if err != nil {
		t.Fatal(err)
	}
	e.expire(t, a)
	if b, err = e.store.Acquire(ctx, name, "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	return a, b
}

// checkStaleRelease guards release by (holder, token).
func checkStaleRelease(t *testing.T, e lockEnv) error {
	a, b := supersede(t, e, "stale-release")
	err := e.store.Release(ctx, a)
	cur, held, herr := e.store.Holder(ctx, "stale-release")
	if herr != nil {
		t.Fatal(herr)
	}
	if !errors.Is(err, fencedlock.ErrNotHeld) || !held || cur.Token != b.Token {
		return fmt.Errorf("a stale release (%v) freed the newer holder's lock: held %v, token %d", err, held, cur.Token)
	}
	return nil
}

// checkStaleRenew guards renew by (holder, token).
func checkStaleRenew(t *testing.T, e lockEnv) error {
	a, _ := supersede(t, e, "stale-renew")
	if _, err := e.store.Renew(ctx, a); !errors.Is(err, fencedlock.ErrNotHeld) {
		return fmt.Errorf("a stale renewal was accepted: %v", err)
	}
	return nil
}

// checkNoRevival guards renew only while not expired.
func checkNoRevival(t *testing.T, e lockEnv) error {
	a, err := e.store.Acquire(ctx, "revival", "a", e.ttl)
	if err != nil {
		t.Fatal(err)
	}
	e.expire(t, a)
	if _, err := e.store.Renew(ctx, a); !errors.Is(err, fencedlock.ErrNotHeld) {
		return fmt.Errorf("an expired lease was revived: %v", err)
	}
	return nil
}

// checkExclusion guards acquire only when free or expired.
func checkExclusion(t *testing.T, e lockEnv) error {
	if _, err := e.store.Acquire(ctx, "exclusive", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	if l, err := e.store.Acquire(ctx, "exclusive", "b", time.Minute); !errors.Is(err, fencedlock.ErrHeld) {
		return fmt.Errorf("a held lock was granted again (token %d): %v", l.Token, err)
	}
	return nil
}

// checkExclusionUnseen guards acquire only when free or expired, for a
// store that has not seen the name's row: the acquire of a held name is
// answered by the insert-first statement (or, with full, the statement that
// inserts or takes a free row), not by the one for known rows.
func checkExclusionUnseen(t *testing.T, full bool) error {
	e := postgresEnv(t)
	if _, err := e.store.Acquire(ctx, "exclusive", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	other := newPostgres(t, e.db, false)
	if full {
		fencedlock.SendFullAcquire(other)
	}
	if l, err := other.Acquire(ctx, "exclusive", "b", time.Minute); !errors.Is(err, fencedlock.ErrHeld) {
		return fmt.Errorf("a held lock was granted to a store that had not seen its row (token %d): %v", l.Token, err)
	}
	return nil
}

// checkExclusionHeldFirst guards acquire only when free or expired, for a
// store whose attempts on rows it has seen mostly found them held: the
// acquire of a held name is answered by the statement that reports the
// holder, not by the update alone (which checkExclusion's store sends).
func checkExclusionHeldFirst(t *testing.T) error {
	e := postgresEnv(t)
	if _, err := e.store.Acquire(ctx, "exclusive", "a", time.Minute); err != nil {
		t.Fatal(err)
	}
	fencedlock.SendHeldFirst(e.store.(*fencedlock.Postgres))
	if l, err := e.store.Acquire(ctx, "exclusive", "b", time.Minute); !errors.Is(err, fencedlock.ErrHeld) {
		return fmt.Errorf("a held lock was granted by the held-first statement (token %d): %v", l.Token, err)
	}
	return nil
}

// checkVerify guards Verify's check.
func checkVerify(t *testing.T, e lockEnv) error {
	a, _ := supersede(t, e, "verified")
	if err := e.store.(*fencedlock.Postgres).Verify(ctx, e.db.Pool, a); !errors.Is(err, fencedlock.ErrFenced) {
		return fmt.Errorf("Verify of a superseded lease = %v, want ErrFenced", err)
	}
	return nil
}

func resourceDB(t *testing.T) *testdb.DB {
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, resourceDDL); err != nil {
		t.Fatal(err)
	}
	return db
}

// checkFencedUpdate guards the token condition of Fence.Update.
func checkFencedUpdate(t *testing.T, db *testdb.DB) error {
	if err := resource.Update(ctx, db.Pool, "res", 5, "owner = $1", "five"); err != nil {
		t.Fatal(err)
	}
	if err := resource.Update(ctx, db.Pool, "res", 4, "owner = $1", "four"); !errors.Is(err, fencedlock.ErrFenced) {
		return fmt.Errorf("a write with token 4 after 5 = %v, want ErrFenced", err)
	}
	return nil
}

// checkStampedRead guards the stamping of Fence.Read: after a read with 7,
// a late write with 6 must be rejected.
func checkStampedRead(t *testing.T, db *testdb.DB) error {
	if err := resource.Update(ctx, db.Pool, "res", 6, "owner = $1", "six"); err != nil {
		t.Fatal(err)
	}
	var owner string
	if err := resource.Read(ctx, db.Pool, "res", 7, "owner", &owner); err != nil {
		t.Fatal(err)
	}
	if err := resource.Update(ctx, db.Pool, "res", 6, "owner = $1", "late six"); !errors.Is(err, fencedlock.ErrFenced) {
		return fmt.Errorf("a write with 6 after a read with 7 = %v, want ErrFenced", err)
	}
	return nil
}

// checkGate guards Gate's comparison.
func checkGate(*testing.T) error {
	var g fencedlock.Gate
	_ = g.Do(5, func() error { return nil })
	if err := g.Do(4, func() error { return nil }); !errors.Is(err, fencedlock.ErrFenced) {
		return fmt.Errorf("the gate admitted 4 after 5: %v", err)
	}
	return nil
}

// guard is one check and the mutant that breaks it.
type guard struct {
	mutant string
	check  func(t *testing.T) error
}

func guards() []guard {
	var g []guard
	for _, env := range []struct {
		name string
		new  func(t *testing.T) lockEnv
	}{{"memory", memoryEnv}, {"postgres", postgresEnv}} {
		for mutant, check := range map[string]func(*testing.T, lockEnv) error{
			"fencedlock.release.tenure":  checkStaleRelease,
			"fencedlock.renew.tenure":    checkStaleRenew,
			"fencedlock.renew.expired":   checkNoRevival,
			"fencedlock.acquire.expired": checkExclusion,
		} {
			g = append(g, guard{mutant + "/" + env.name, func(t *testing.T) error { return check(t, env.new(t)) }})
		}
	}
	return append(g,
		guard{"fencedlock.verify.check", func(t *testing.T) error { return checkVerify(t, postgresEnv(t)) }},
		guard{"fencedlock.acquire.purge-fence/insert", func(t *testing.T) error { return checkPurgeFence(t, false) }},
		guard{"fencedlock.acquire.purge-fence/full", func(t *testing.T) error { return checkPurgeFence(t, true) }},
		guard{"fencedlock.acquire.expired/postgres-unseen-insert", func(t *testing.T) error { return checkExclusionUnseen(t, false) }},
		guard{"fencedlock.acquire.expired/postgres-unseen-full", func(t *testing.T) error { return checkExclusionUnseen(t, true) }},
		guard{"fencedlock.acquire.expired/postgres-seen-held-first", checkExclusionHeldFirst},
		guard{"fencedlock.fence.update.token", func(t *testing.T) error { return checkFencedUpdate(t, resourceDB(t)) }},
		guard{"fencedlock.fence.read.stamp", func(t *testing.T) error { return checkStampedRead(t, resourceDB(t)) }},
		guard{"fencedlock.gate.compare", checkGate},
	)
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
