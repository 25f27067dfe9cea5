package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The checks below are the bodies of the tests that guard each safety
// condition of the package. Each returns the violation it sees, or nil: the
// default build asserts nil (TestGuards), and the lockfree_mutants build
// turns each condition's mutant on and asserts that its check sees the
// violation (TestMutantsAreCaught), which proves the check can fail.

// guardStore is what both backends implement.
type guardStore interface {
	idempotency.Executor
	idempotency.LeaseStore
	idempotency.FencedStore
	Lookup(ctx context.Context, key idempotency.Key) (idempotency.Record, bool, error)
}

// guardEnv is a store whose leases and retention a check can let run out.
type guardEnv struct {
	store guardStore
	// ttl is a lease short enough to run out in a test.
	ttl time.Duration
	// pass lets time pass until what ended by then has ended on the
	// store's clock: until(ok) returns once ok is true.
	pass func(t *testing.T, d time.Duration, until func() bool)
}

// guardRetention is the retention of the guards' stores: short, so that a
// key expires within a test on PostgreSQL's clock.
const guardRetention = 200 * time.Millisecond

func memoryGuardEnv(t *testing.T) guardEnv {
	c := &clock.Manual{}
	m, err := idempotency.NewMemory(&idempotency.MemoryConfig{Clock: c, Retention: guardRetention, InFlightWait: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return guardEnv{store: m, ttl: guardRetention / 4, pass: func(t *testing.T, d time.Duration, until func() bool) {
		c.Advance(d)
		if !until() {
			t.Fatalf("nothing ended after the clock moved %v", d)
		}
	}}
}

func postgresGuardEnv(t *testing.T) guardEnv {
	db := testdb.New(t, idempotency.Migrations()...)
	p := newPostgres(t, db, &idempotency.PostgresConfig{Retention: guardRetention, InFlightWait: 50 * time.Millisecond})
	return guardEnv{store: p, ttl: 100 * time.Millisecond, pass: func(t *testing.T, _ time.Duration, until func() bool) {
		deadline := time.Now().Add(30 * time.Second)
		for !until() {
			if time.Now().After(deadline) {
				t.Fatal("nothing ended on the database's clock within 30s")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}}
}

func guardKey(t *testing.T) idempotency.Key { return idempotency.Key{Tenant: "guard", ID: t.Name()} }

var (
	fpA = idempotency.NewFingerprint([]byte("a"))
	fpB = idempotency.NewFingerprint([]byte("b"))
)

// checkRunsOnce guards the claim's conflict: a key with a record does not
// run again.
func checkRunsOnce(t *testing.T, e guardEnv) error {
	key, runs := guardKey(t), 0
	for range 2 {
		if _, err := e.store.Do(ctx, key, fpA, func(context.Context) (idempotency.Result, error) {
			runs++
			return idempotency.Result{Status: 201}, nil
		}); err != nil {
			return fmt.Errorf("Do: %w", err)
		}
	}
	if runs != 1 {
		return fmt.Errorf("the key's work ran %d times", runs)
	}
	return nil
}

// checkNotBeside guards the in-flight check of Do: a duplicate does not
// run beside the execution in flight.
func checkNotBeside(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	started, release, firstDone := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(firstDone)
		_, _ = e.store.Do(ctx, key, fpA, func(context.Context) (idempotency.Result, error) {
			close(started)
			<-release
			return idempotency.Result{Status: 201}, nil
		})
	}()
	<-started
	ran := false
	_, err := e.store.Do(ctx, key, fpA, func(context.Context) (idempotency.Result, error) {
		ran = true
		return idempotency.Result{Status: 201}, nil
	})
	close(release)
	<-firstDone
	if ran || !errors.Is(err, idempotency.ErrInFlight) {
		return fmt.Errorf("a duplicate beside the execution in flight ran %v and answered %v", ran, err)
	}
	return nil
}

// checkLiveLease guards the in-flight check of a leased claim: a live lease
// is not taken over.
func checkLiveLease(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	if _, _, err := e.store.Claim(ctx, key, fpA, time.Minute); err != nil {
		t.Fatal(err)
	}
	if l, _, err := e.store.Claim(ctx, key, fpA, time.Minute); !errors.Is(err, idempotency.ErrInFlight) {
		return fmt.Errorf("a live lease was taken over (token %d): %v", l.Token, err)
	}
	return nil
}

// checkFingerprint guards the fingerprint comparison of Do.
func checkFingerprint(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	ok := func(context.Context) (idempotency.Result, error) { return idempotency.Result{Status: 201}, nil }
	if _, err := e.store.Do(ctx, key, fpA, ok); err != nil {
		t.Fatal(err)
	}
	if res, err := e.store.Do(ctx, key, fpB, ok); !errors.Is(err, idempotency.ErrKeyReused) {
		return fmt.Errorf("a key reused with another payload answered %+v, %v", res, err)
	}
	return nil
}

// checkTakeoverFingerprint guards the fingerprint comparison of a leased
// takeover: an expired attempt is not resumed by another request.
func checkTakeoverFingerprint(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	if _, _, err := e.store.Claim(ctx, key, fpA, e.ttl); err != nil {
		t.Fatal(err)
	}
	var err error
	e.pass(t, 2*e.ttl, func() bool {
		var l idempotency.Lease
		l, _, err = e.store.Claim(ctx, key, fpB, e.ttl)
		if err == nil {
			err = fmt.Errorf("took the attempt over with token %d", l.Token)
		}
		return !errors.Is(err, idempotency.ErrInFlight)
	})
	if !errors.Is(err, idempotency.ErrKeyReused) {
		return fmt.Errorf("another request's claim of an expired attempt: %v", err)
	}
	return nil
}

// checkExpired guards the expiry check: a spent key neither replays nor
// runs again.
func checkExpired(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	if _, err := e.store.Do(ctx, key, fpA, func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 201}, nil
	}); err != nil {
		t.Fatal(err)
	}
	e.pass(t, 2*guardRetention, func() bool {
		rec, _, err := e.store.Lookup(ctx, key)
		return err == nil && rec.State == idempotency.Expired
	})
	res, err := e.store.Do(ctx, key, fpA, func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 202}, nil
	})
	if !errors.Is(err, idempotency.ErrExpired) {
		return fmt.Errorf("a spent key answered %+v, %v", res, err)
	}
	return nil
}

// supersede claims key for attempt a, lets its lease run out and claims it
// again for b: a is the stale attempt, b the current one.
func supersede(t *testing.T, e guardEnv, key idempotency.Key) (a, b idempotency.Lease) {
	t.Helper()
	a, _, err := e.store.Claim(ctx, key, fpA, e.ttl)
	if err != nil {
		t.Fatal(err)
	}
	e.pass(t, 2*e.ttl, func() bool {
		b, _, err = e.store.Claim(ctx, key, fpA, time.Minute)
		return err == nil
	})
	return a, b
}

// checkStaleComplete guards the token compare-and-set of Complete.
func checkStaleComplete(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	a, _ := supersede(t, e, key)
	if err := e.store.Complete(ctx, a, idempotency.Result{Status: 201, Body: []byte("stale")}); !errors.Is(err, idempotency.ErrSuperseded) {
		return fmt.Errorf("a superseded attempt completed: %v", err)
	}
	return nil
}

// checkStaleRelease guards the token compare-and-set of Release.
func checkStaleRelease(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	a, b := supersede(t, e, key)
	err := e.store.Release(ctx, a)
	rec, found, lerr := e.store.Lookup(ctx, key)
	if lerr != nil {
		t.Fatal(lerr)
	}
	if !errors.Is(err, idempotency.ErrSuperseded) || !found || rec.Token != b.Token {
		return fmt.Errorf("a superseded attempt's release (%v) removed the newer attempt's record: found %v, token %d", err, found, rec.Token)
	}
	return nil
}

// checkFencedPut guards the token condition of PutFenced.
func checkFencedPut(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	if _, err := e.store.ReadFenced(ctx, key, fpA, 5); err != nil {
		t.Fatal(err)
	}
	if err := e.store.PutFenced(ctx, key, fpA, 4, idempotency.Result{Status: 201}); !errors.Is(err, fencedlock.ErrFenced) {
		return fmt.Errorf("a put with token 4 after a read with 5 = %v, want ErrFenced", err)
	}
	return nil
}

// checkFencedStamp guards the stamp of ReadFenced: after a read with 5, a
// late put with 4 must be refused, even though 4 read the record first.
func checkFencedStamp(t *testing.T, e guardEnv) error {
	key := guardKey(t)
	for _, token := range []int64{4, 5} {
		if _, err := e.store.ReadFenced(ctx, key, fpA, token); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.store.PutFenced(ctx, key, fpA, 4, idempotency.Result{Status: 201}); !errors.Is(err, fencedlock.ErrFenced) {
		return fmt.Errorf("a put with token 4 after reads with 4 and 5 = %v, want ErrFenced", err)
	}
	return nil
}

// checkRunsOnceInTx is checkRunsOnce in the caller's transaction
// (WithDB(tx)), whose claim is one statement of its own.
func checkRunsOnceInTx(t *testing.T) error {
	db := testdb.New(t, idempotency.Migrations()...)
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	return checkRunsOnce(t, guardEnv{store: newPostgres(t, db, nil).WithDB(tx)})
}

// checkLostResponse guards the middleware's lost-response marker: a
// handler that ran to the end with a response too large to store runs
// once, and its retry gets the marker.
func checkLostResponse(t *testing.T, exec idempotency.Executor) error {
	var runs atomic.Int64
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1) // the charge
		io.WriteString(w, "a response over the limit")
	})
	mw, err := idempotency.NewMiddleware(exec, handler, &idempotency.MiddlewareConfig{GlobalScope: true, MaxResponseBody: 8})
	if err != nil {
		t.Fatal(err)
	}
	var codes []int
	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader("pay"))
		req.Header.Set(idempotency.HeaderKey, "k")
		rec := httptest.NewRecorder()
		mw.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
	}
	if n := runs.Load(); n != 1 {
		return fmt.Errorf("the handler ran %d times for one key (answers %v): its finished work was invited to run again", n, codes)
	}
	return nil
}

// lostResponseGuards are checkLostResponse on each executor whose failed
// Do leaves the handler's effects in place.
func lostResponseGuards() []guard {
	executors := map[string]func(t *testing.T) idempotency.Executor{
		"memory": func(t *testing.T) idempotency.Executor { return memoryGuardEnv(t).store },
		"leased": func(t *testing.T) idempotency.Executor {
			l, err := idempotency.NewLeased(memoryGuardEnv(t).store, &idempotency.LeasedConfig{TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		"fenced": func(t *testing.T) idempotency.Executor {
			f, err := idempotency.NewFenced(memoryLocks(nil), memoryGuardEnv(t).store,
				&idempotency.FencedConfig{LockerConfig: fencedlock.LockerConfig{TTL: time.Hour}})
			if err != nil {
				t.Fatal(err)
			}
			return f
		},
	}
	var g []guard
	for _, name := range []string{"memory", "leased", "fenced"} {
		g = append(g, guard{"idempotency.middleware.lost-response/" + name, func(t *testing.T) error {
			return checkLostResponse(t, executors[name](t))
		}})
	}
	return g
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
		new  func(t *testing.T) guardEnv
	}{{"memory", memoryGuardEnv}, {"postgres", postgresGuardEnv}} {
		for _, c := range []struct {
			mutant string
			check  func(*testing.T, guardEnv) error
		}{
			{"idempotency.claim.conflict", checkRunsOnce},
			{"idempotency.claim.in-flight", checkNotBeside},
			{"idempotency.claim.in-flight/leased", checkLiveLease},
			{"idempotency.fingerprint", checkFingerprint},
			{"idempotency.fingerprint/leased", checkTakeoverFingerprint},
			{"idempotency.expired", checkExpired},
			{"idempotency.leased.complete.token", checkStaleComplete},
			{"idempotency.leased.release.token", checkStaleRelease},
			{"idempotency.fenced.put.token", checkFencedPut},
			{"idempotency.fenced.read.stamp", checkFencedStamp},
		} {
			g = append(g, guard{c.mutant + "/" + env.name, func(t *testing.T) error { return c.check(t, env.new(t)) }})
		}
	}
	g = append(g, guard{"idempotency.claim.conflict/postgres-tx", checkRunsOnceInTx})
	return append(g, lostResponseGuards()...)
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
