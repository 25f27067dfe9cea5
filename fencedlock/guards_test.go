package fencedlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

// checkValueTenure guards SetValue by (holder, token): a stale tenure's
// value reaches nobody.
func checkValueTenure(t *testing.T, e lockEnv) error {
	a, b := supersede(t, e, "value-tenure")
	s := e.store.(fencedlock.ValueStore)
	b, err := s.SetValue(ctx, b, "b's")
	if err != nil {
		t.Fatal(err)
	}
	a.TTL = e.ttl
	_, err = s.SetValue(ctx, a, "a's, stale")
	cur, _, herr := e.store.Holder(ctx, "value-tenure")
	if herr != nil {
		t.Fatal(herr)
	}
	if !errors.Is(err, fencedlock.ErrNotHeld) || cur.Value != "b's" {
		return fmt.Errorf("a stale tenure's SetValue (%v) left the value %q, want b's", err, cur.Value)
	}
	return nil
}

// checkValueCleared guards the new tenure's value: a grant by Acquire
// starts without one, whatever the tenure before it had.
func checkValueCleared(t *testing.T, e lockEnv) error {
	s := e.store.(fencedlock.ValueStore)
	a, err := s.AcquireValue(ctx, "value-cleared", "a", time.Minute, "a's secret")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "value-cleared", "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	cur, _, err := s.Holder(ctx, "value-cleared")
	if err != nil {
		t.Fatal(err)
	}
	if cur.Value != "" {
		return fmt.Errorf("b's tenure shows the value %q of a's", cur.Value)
	}
	return nil
}

// checkAcquireAllAtomic guards AcquireAll's all or nothing: with one name
// held, none of the others is taken.
func checkAcquireAllAtomic(t *testing.T, e lockEnv) error {
	if _, err := e.store.Acquire(ctx, "all/2", "b", time.Minute); err != nil {
		t.Fatal(err)
	}
	_, err := e.store.(fencedlock.MultiStore).AcquireAll(ctx, []string{"all/3", "all/2", "all/1"}, "a", time.Minute)
	if !errors.Is(err, fencedlock.ErrHeld) {
		t.Fatalf("AcquireAll with all/2 held: %v", err)
	}
	for _, n := range []string{"all/1", "all/3"} {
		if cur, held, _ := e.store.Holder(ctx, n); held {
			return fmt.Errorf("a failed AcquireAll left %s held by %s", n, cur.Holder)
		}
	}
	return nil
}

// checkAcquireAllOrder guards AcquireAll's sorted order, which keeps two
// AcquireAll of overlapping names from deadlocking. It asks for "b" then
// "a" while a transaction holds row "a", and waits until the call is
// blocked. In name order it waits for "a" before it touches "b", so "b" is
// free to lock (FOR UPDATE NOWAIT); in the caller's order it took "b"
// first. Each step waits for the one before: no race decides the outcome.
func checkAcquireAllOrder(t *testing.T) error {
	e := postgresEnv(t)
	a, b := "order/a", "order/b"
	for _, n := range []string{a, b} {
		l, err := e.store.Acquire(ctx, n, "setup", time.Minute) // the row exists, free
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	blocker, err := e.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `SELECT FROM lockfree_locks WHERE name = $1 FOR UPDATE`, a); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, e.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	pid := int32(conn.PgConn().PID())
	s, err := fencedlock.NewPostgres(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	result := make(chan error, 1)
	go func() {
		_, err := s.AcquireAll(ctx, []string{b, a}, "client", time.Minute)
		result <- err
	}()
	waitFor(t, 60*time.Second, func() bool {
		var blocked bool
		err := e.db.Pool.QueryRow(ctx, `SELECT cardinality(pg_blocking_pids($1)) > 0`, pid).Scan(&blocked)
		return err == nil && blocked
	})
	probe, err := e.db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, taken := probe.Exec(ctx, `SELECT FROM lockfree_locks WHERE name = $1 FOR UPDATE NOWAIT`, b)
	_ = probe.Rollback(ctx)
	if err := blocker.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-result; err != nil {
		return fmt.Errorf("AcquireAll of two free names: %w", err)
	}
	if taken != nil {
		return fmt.Errorf("AcquireAll(%q, %q) locked %q while it waited for %q: not in name order (%v)", b, a, b, a, taken)
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
			"fencedlock.release.tenure":      checkStaleRelease,
			"fencedlock.renew.tenure":        checkStaleRenew,
			"fencedlock.renew.expired":       checkNoRevival,
			"fencedlock.acquire.expired":     checkExclusion,
			"fencedlock.value.tenure":        checkValueTenure,
			"fencedlock.acquire.clear-value": checkValueCleared,
			"fencedlock.acquireall.atomic":   checkAcquireAllAtomic,
		} {
			g = append(g, guard{mutant + "/" + env.name, func(t *testing.T) error { return check(t, env.new(t)) }})
		}
	}
	return append(g,
		guard{"fencedlock.verify.check", func(t *testing.T) error { return checkVerify(t, postgresEnv(t)) }},
		guard{"fencedlock.acquire.purge-fence/insert", checkPurgeFence},
		guard{"fencedlock.fence.update.token", func(t *testing.T) error { return checkFencedUpdate(t, resourceDB(t)) }},
		guard{"fencedlock.fence.read.stamp", func(t *testing.T) error { return checkStampedRead(t, resourceDB(t)) }},
		guard{"fencedlock.gate.compare", checkGate},
		guard{"fencedlock.acquireall.order", checkAcquireAllOrder},
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
