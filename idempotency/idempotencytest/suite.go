// Package idempotencytest is the behaviour suite every idempotency store must
// pass, in the manner of testing/slogtest: the memory and PostgreSQL backends
// run it, and so can any other implementation.
package idempotencytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
)

// Store is everything a backend offers: transactional-mode Do, leased mode,
// the fenced twin's records, lookup and purge.
type Store interface {
	idempotency.Executor
	idempotency.LeaseStore
	idempotency.FencedStore
	Lookup(ctx context.Context, key idempotency.Key) (idempotency.Record, bool, error)
	Purge(ctx context.Context, limit int) (int64, error)
}

// Config is what a subtest needs of the store it is given; a zero field
// means the store's default.
type Config struct {
	Retention, TombstoneRetention, InFlightWait time.Duration
}

// Harness is a store under test and control of its clock.
type Harness struct {
	Store Store
	// TTL is the lease used by tests that let leases expire: short on a
	// real clock (a few hundred milliseconds), anything on a manual one.
	TTL time.Duration
	// Advance lets d pass on the store's clock: it moves a manual clock
	// forward, or sleeps when the store uses a real one.
	Advance func(d time.Duration)
}

// Run runs the suite. newHarness is called once per subtest with the
// configuration the subtest needs; it must return a store built with it.
// The subtests run in parallel: newHarness must be safe for concurrent use,
// and the stores it returns must share no records or clock (each its own
// database or schema): the purge tests count what a store purges.
func Run(t *testing.T, newHarness func(t *testing.T, cfg Config) Harness) {
	tests := []struct {
		name string
		cfg  Config
		fn   func(t *testing.T, h Harness)
	}{
		{"ParallelDuplicatesRunOnce", Config{}, testParallel},
		{"ReplayStoredResult", Config{}, testReplay},
		{"FailureLeavesNoTrace", Config{}, testFailure},
		{"FingerprintMismatch", Config{}, testReused},
		{"BadKeysWriteNothing", Config{}, testBadKeys},
		{"TenantsScopeKeys", Config{}, testTenants},
		{"InFlightWaitIsBounded", Config{InFlightWait: 50 * time.Millisecond}, testInFlight},
		{"ExpiryAndTombstones", Config{Retention: 300 * time.Millisecond, TombstoneRetention: 300 * time.Millisecond}, testExpiry},
		{"PurgeIsBatched", Config{Retention: purgeRetention}, testPurgeBatched},
		{"LeasedClaimCompleteReplay", Config{}, testLeasedReplay},
		{"LeasedStaleAttemptIsRejected", Config{}, testStaleAttempt},
		{"LeasedRenewNeverRevives", Config{}, testRenew},
		{"LeasedRecoveryPoints", Config{}, testRecoveryPoints},
		{"LeasedParallelDuplicatesRunOnce", Config{}, testLeasedParallel},
		{"LeasedStepsResume", Config{}, testSteps},
		{"FencedPutRejectsStaleToken", Config{}, testPutFenced},
		{"FencedReadStampsTheRecord", Config{}, testReadFenced},
		{"ResultsAreStoredExactly", Config{}, testExactResults},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, newHarness(t, tt.cfg))
		})
	}
}

var ctx = context.Background()

func key(t *testing.T) idempotency.Key {
	return idempotency.Key{Tenant: "suite", ID: t.Name()}
}

var fp = idempotency.NewFingerprint([]byte("POST"), []byte("/charges"), []byte(`{"amount":100}`))

func result(body string) idempotency.Result {
	return idempotency.Result{Status: http.StatusCreated, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
}

func sameResult(a, b idempotency.Result) bool {
	return a.Status == b.Status && bytes.Equal(a.Body, b.Body) && fmt.Sprint(a.Header) == fmt.Sprint(b.Header)
}

func testParallel(t *testing.T, h Harness) {
	var effects atomic.Int64
	const n = 16
	results := make([]idempotency.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			results[i], errs[i] = h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) {
				c := effects.Add(1)
				time.Sleep(20 * time.Millisecond) // let the duplicates pile up behind the claim
				return result(fmt.Sprintf("charge %d", c)), nil
			})
		})
	}
	wg.Wait()
	if got := effects.Load(); got != 1 {
		t.Fatalf("the effect ran %d times, want once", got)
	}
	want := result("charge 1")
	for i := range n {
		switch {
		case errors.Is(errs[i], idempotency.ErrInFlight):
		case errs[i] != nil:
			t.Errorf("caller %d: %v", i, errs[i])
		case !sameResult(results[i], want):
			t.Errorf("caller %d got %+v, want %+v", i, results[i], want)
		}
	}
}

func testReplay(t *testing.T, h Harness) {
	want := result(`{"id":"ch_1"}`)
	got, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) { return want, nil })
	if err != nil || got.Replayed || !sameResult(got, want) {
		t.Fatalf("first Do = %+v, %v", got, err)
	}
	got, err = h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) {
		t.Fatal("fn ran for a completed key")
		return idempotency.Result{}, nil
	})
	if err != nil || !got.Replayed || !sameResult(got, want) {
		t.Fatalf("replay = %+v, %v; want %+v replayed", got, err, want)
	}
	rec, found, err := h.Store.Lookup(ctx, key(t))
	if err != nil || !found || rec.State != idempotency.Done || !sameResult(rec.Result, want) || rec.Fingerprint != fp {
		t.Fatalf("Lookup = %+v, %v, %v", rec, found, err)
	}
}

func testFailure(t *testing.T, h Harness) {
	boom := errors.New("boom")
	_, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) { return idempotency.Result{}, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	if _, found, err := h.Store.Lookup(ctx, key(t)); err != nil || found {
		t.Fatalf("a failed execution left a record (found %v, %v)", found, err)
	}
	ran := false
	if _, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) { ran = true; return result("ok"), nil }); err != nil || !ran {
		t.Fatalf("retry after failure: ran %v, %v", ran, err)
	}
}

func testReused(t *testing.T, h Harness) {
	if _, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) { return result("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	other := idempotency.NewFingerprint([]byte("POST"), []byte("/charges"), []byte(`{"amount":999}`))
	_, err := h.Store.Do(ctx, key(t), other, func(context.Context) (idempotency.Result, error) {
		t.Fatal("fn ran for a reused key")
		return idempotency.Result{}, nil
	})
	if !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("Do with another fingerprint = %v, want ErrKeyReused", err)
	}
	if _, _, err := h.Store.Claim(ctx, key(t), other, time.Minute); !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("Claim with another fingerprint = %v, want ErrKeyReused", err)
	}
}

func testBadKeys(t *testing.T, h Harness) {
	long := strings.Repeat("k", idempotency.MaxKeyLen+1)
	for _, k := range []idempotency.Key{
		{ID: ""}, {ID: long}, {Tenant: long, ID: "k"}, {ID: "bad\xff"}, {ID: "nul\x00"},
	} {
		_, err := h.Store.Do(ctx, k, fp, func(context.Context) (idempotency.Result, error) {
			t.Fatalf("fn ran for the invalid key %q", k.ID)
			return idempotency.Result{}, nil
		})
		if !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("Do(%q/%q) = %v, want ErrInvalid", k.Tenant, k.ID, err)
		}
		if _, _, err := h.Store.Claim(ctx, k, fp, time.Minute); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("Claim(%q) = %v, want ErrInvalid", k.ID, err)
		}
		if err := h.Store.PutFenced(ctx, k, fp, 1, result("x")); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("PutFenced(%q) = %v, want ErrInvalid", k.ID, err)
		}
		if _, err := h.Store.ReadFenced(ctx, k, fp, 1); !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("ReadFenced(%q) = %v, want ErrInvalid", k.ID, err)
		}
	}
	ok := key(t)
	if _, _, err := h.Store.Claim(ctx, ok, fp, 0); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("Claim with ttl 0 = %v, want ErrInvalid", err)
	}
	if err := h.Store.Complete(ctx, idempotency.Lease{Key: ok, TTL: time.Minute}, result("x")); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("Complete without a token = %v, want ErrInvalid", err)
	}
	if _, err := h.Store.ReadFenced(ctx, ok, fp, 0); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("ReadFenced without a token = %v, want ErrInvalid", err)
	}
	if _, err := h.Store.Purge(ctx, 0); !errors.Is(err, idempotency.ErrInvalid) {
		t.Errorf("Purge(0) = %v, want ErrInvalid", err)
	}
	if _, found, _ := h.Store.Lookup(ctx, ok); found {
		t.Fatal("bad input wrote a record")
	}
	max := idempotency.Key{Tenant: strings.Repeat("t", idempotency.MaxKeyLen), ID: strings.Repeat("é", idempotency.MaxKeyLen/2)}
	if _, err := h.Store.Do(ctx, max, fp, func(context.Context) (idempotency.Result, error) { return result("ok"), nil }); err != nil {
		t.Fatalf("Do with a %d-byte key: %v", len(max.ID), err)
	}
}

func testTenants(t *testing.T, h Harness) {
	var runs atomic.Int64
	for _, tenant := range []string{"acme", "globex", ""} {
		k := idempotency.Key{Tenant: tenant, ID: t.Name()}
		res, err := h.Store.Do(ctx, k, fp, func(context.Context) (idempotency.Result, error) {
			runs.Add(1)
			return result(tenant), nil
		})
		if err != nil || res.Replayed || string(res.Body) != tenant {
			t.Fatalf("tenant %q: %+v, %v", tenant, res, err)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("%d runs for three tenants", runs.Load())
	}
}

func testInFlight(t *testing.T, h Harness) {
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) {
			close(started)
			<-finish
			return result("first"), nil
		})
		done <- err
	}()
	<-started
	_, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) {
		t.Error("a duplicate ran while the first was in flight")
		return idempotency.Result{}, nil
	})
	var inFlight *idempotency.InFlightError
	if !errors.As(err, &inFlight) || inFlight.RetryAfter <= 0 || inFlight.Key != key(t) {
		t.Fatalf("duplicate in flight = %v, want *InFlightError with a retry hint", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	res, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) {
		t.Error("fn ran after completion")
		return idempotency.Result{}, nil
	})
	if err != nil || !res.Replayed || string(res.Body) != "first" {
		t.Fatalf("after completion = %+v, %v", res, err)
	}
}

func mustNotRun(t *testing.T) func(context.Context) (idempotency.Result, error) {
	return func(context.Context) (idempotency.Result, error) {
		t.Error("fn ran for a spent key")
		return idempotency.Result{}, nil
	}
}

// eventually advances the store's clock in steps until cond holds.
func eventually(t *testing.T, h Harness, step time.Duration, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 200 {
			t.Fatal("condition not met")
		}
		h.Advance(step)
	}
}

func testExpiry(t *testing.T, h Harness) {
	if _, err := h.Store.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) { return result("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	h.Advance(300 * time.Millisecond)
	eventually(t, h, 50*time.Millisecond, func() bool {
		rec, _, _ := h.Store.Lookup(ctx, key(t))
		return rec.State == idempotency.Expired
	})
	if _, err := h.Store.Do(ctx, key(t), fp, mustNotRun(t)); !errors.Is(err, idempotency.ErrExpired) {
		t.Fatalf("Do after expiry = %v, want ErrExpired", err)
	}
	if n, err := h.Store.Purge(ctx, 10); err != nil || n != 1 {
		t.Fatalf("Purge = %d, %v; want the one record tombstoned", n, err)
	}
	// The tombstone keeps the key spent: a late retry is refused, not run.
	if _, err := h.Store.Do(ctx, key(t), fp, mustNotRun(t)); !errors.Is(err, idempotency.ErrExpired) {
		t.Fatalf("Do after purge = %v, want ErrExpired", err)
	}
	if _, _, err := h.Store.Claim(ctx, key(t), fp, time.Minute); !errors.Is(err, idempotency.ErrExpired) {
		t.Fatalf("Claim after purge = %v, want ErrExpired", err)
	}
	rec, found, err := h.Store.Lookup(ctx, key(t))
	if err != nil || !found || rec.State != idempotency.Expired || rec.Result.Body != nil {
		t.Fatalf("tombstone = %+v, %v, %v", rec, found, err)
	}
	// Once the tombstone's own retention is over, it is deleted.
	h.Advance(300 * time.Millisecond)
	eventually(t, h, 50*time.Millisecond, func() bool {
		n, err := h.Store.Purge(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	if _, found, _ := h.Store.Lookup(ctx, key(t)); found {
		t.Fatal("tombstone not deleted")
	}
}

// purgeRetention is PurgeIsBatched's retention: the live record must stay
// live through the purge loop, however loaded the machine, so the margin is
// wide (on PostgreSQL the test waits for it once, with Advance).
const purgeRetention = 2 * time.Second

func testPurgeBatched(t *testing.T, h Harness) {
	for i := range 5 {
		k := idempotency.Key{Tenant: "purge", ID: fmt.Sprintf("%s/%d", t.Name(), i)}
		if _, err := h.Store.Do(ctx, k, fp, func(context.Context) (idempotency.Result, error) { return result("ok"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	live := key(t)
	h.Advance(purgeRetention)
	eventually(t, h, 20*time.Millisecond, func() bool {
		rec, _, _ := h.Store.Lookup(ctx, idempotency.Key{Tenant: "purge", ID: t.Name() + "/4"})
		return rec.State == idempotency.Expired
	})
	if _, err := h.Store.Do(ctx, live, fp, func(context.Context) (idempotency.Result, error) { return result("ok"), nil }); err != nil {
		t.Fatal(err)
	}
	var got []int64
	for {
		n, err := h.Store.Purge(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
		if n < 2 {
			break
		}
	}
	if fmt.Sprint(got) != "[2 2 1]" {
		t.Fatalf("batches %v, want [2 2 1]", got)
	}
	if rec, _, _ := h.Store.Lookup(ctx, live); rec.State != idempotency.Done {
		t.Fatalf("Purge touched a live record: %+v", rec)
	}
}

func testLeasedReplay(t *testing.T, h Harness) {
	l, replay, err := h.Store.Claim(ctx, key(t), fp, time.Minute)
	if err != nil || replay != nil || l.Token <= 0 || l.Key != key(t) || l.RecoveryPoint != "" {
		t.Fatalf("Claim = %+v, %v, %v", l, replay, err)
	}
	var inFlight *idempotency.InFlightError
	if _, _, err := h.Store.Claim(ctx, key(t), fp, time.Minute); !errors.As(err, &inFlight) || inFlight.RetryAfter < time.Second {
		t.Fatalf("second Claim = %v, want *InFlightError with the rest of the lease", err)
	}
	want := result("leased")
	if err := h.Store.Complete(ctx, l, want); err != nil {
		t.Fatal(err)
	}
	_, replay, err = h.Store.Claim(ctx, key(t), fp, time.Minute)
	if err != nil || replay == nil || !replay.Replayed || !sameResult(*replay, want) {
		t.Fatalf("Claim after completion = %+v, %v", replay, err)
	}
	if err := h.Store.Complete(ctx, l, result("again")); !errors.Is(err, idempotency.ErrSuperseded) {
		t.Fatalf("second Complete = %v, want ErrSuperseded", err)
	}
}

// takeOver claims key once the lease of an earlier attempt has expired.
func takeOver(t *testing.T, h Harness, k idempotency.Key) idempotency.Lease {
	t.Helper()
	h.Advance(h.TTL)
	var l idempotency.Lease
	eventually(t, h, h.TTL/5, func() bool {
		var err error
		l, _, err = h.Store.Claim(ctx, k, fp, time.Minute)
		if err != nil && !errors.Is(err, idempotency.ErrInFlight) {
			t.Fatal(err)
		}
		return err == nil
	})
	return l
}

func testStaleAttempt(t *testing.T, h Harness) {
	a, _, err := h.Store.Claim(ctx, key(t), fp, h.TTL)
	if err != nil {
		t.Fatal(err)
	}
	b := takeOver(t, h, key(t))
	if b.Token <= a.Token {
		t.Fatalf("takeover token %d not above %d", b.Token, a.Token)
	}
	var s *idempotency.SupersededError
	for name, op := range map[string]func() error{
		"Complete":   func() error { return h.Store.Complete(ctx, a, result("stale")) },
		"Checkpoint": func() error { return h.Store.Checkpoint(ctx, a, "stale-step") },
		"Release":    func() error { return h.Store.Release(ctx, a) },
		"Renew":      func() error { _, err := h.Store.Renew(ctx, a); return err },
	} {
		if err := op(); !errors.As(err, &s) || s.Presented != a.Token || s.Required != b.Token {
			t.Errorf("stale %s = %v, want *SupersededError{%d, %d}", name, err, a.Token, b.Token)
		}
	}
	if err := h.Store.Complete(ctx, b, result("fresh")); err != nil {
		t.Fatal(err)
	}
	rec, _, _ := h.Store.Lookup(ctx, key(t))
	if rec.State != idempotency.Done || string(rec.Result.Body) != "fresh" || rec.RecoveryPoint != "" || rec.Token != b.Token {
		t.Fatalf("record after a stale attempt = %+v", rec)
	}
}

func testRenew(t *testing.T, h Harness) {
	a, _, err := h.Store.Claim(ctx, key(t), fp, h.TTL)
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.Store.Renew(ctx, a)
	if err != nil || r.Token != a.Token || r.Expires.Before(a.Expires) {
		t.Fatalf("Renew = %+v, %v", r, err)
	}
	h.Advance(h.TTL)
	eventually(t, h, h.TTL/5, func() bool {
		_, err := h.Store.Renew(ctx, a)
		if err != nil && !errors.Is(err, idempotency.ErrLeaseLost) {
			t.Fatalf("Renew of an expired lease = %v, want ErrLeaseLost", err)
		}
		return err != nil
	})
	// Nobody took over: the token is still the record's, so completion is
	// safe and accepted.
	if err := h.Store.Complete(ctx, a, result("late")); err != nil {
		t.Fatalf("Complete with the current token after expiry: %v", err)
	}
}

func testRecoveryPoints(t *testing.T, h Harness) {
	a, _, err := h.Store.Claim(ctx, key(t), fp, h.TTL)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Checkpoint(ctx, a, "charged"); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Checkpoint(ctx, a, ""); !errors.Is(err, idempotency.ErrInvalid) {
		t.Fatalf("empty checkpoint = %v", err)
	}
	if err := h.Store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b, _, err := h.Store.Claim(ctx, key(t), fp, time.Minute)
	if err != nil || b.RecoveryPoint != "charged" || b.Token <= a.Token {
		t.Fatalf("Claim after a released attempt = %+v, %v; want recovery point charged", b, err)
	}
	// Without a recovery point, release leaves no trace.
	other := idempotency.Key{Tenant: "suite", ID: t.Name() + "/fresh"}
	c, _, err := h.Store.Claim(ctx, other, fp, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Release(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := h.Store.Lookup(ctx, other); found {
		t.Fatal("release without a recovery point left a record")
	}
	d, _, err := h.Store.Claim(ctx, other, fp, time.Minute)
	if err != nil || d.Token <= c.Token {
		t.Fatalf("Claim after release = %+v, %v; token must exceed %d", d, err, c.Token)
	}
}

func testLeasedParallel(t *testing.T, h Harness) {
	leased, err := idempotency.NewLeased(h.Store, &idempotency.LeasedConfig{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var effects atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Go(func() {
			// Retry in-flight answers, as a client would.
			for {
				res, err := leased.Do(ctx, key(t), fp, func(context.Context) (idempotency.Result, error) {
					effects.Add(1)
					return result("leased once"), nil
				})
				if errors.Is(err, idempotency.ErrInFlight) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err == nil && string(res.Body) != "leased once" {
					err = fmt.Errorf("got %q", res.Body)
				}
				errs <- err
				return
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if effects.Load() != 1 {
		t.Fatalf("the effect ran %d times, want once", effects.Load())
	}
}

func testSteps(t *testing.T, h Harness) {
	leased, err := idempotency.NewLeased(h.Store, &idempotency.LeasedConfig{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var charged, shipped atomic.Int64
	shipFails := errors.New("carrier down")
	work := func(fail bool) func(ctx context.Context) (idempotency.Result, error) {
		return func(ctx context.Context) (idempotency.Result, error) {
			a, ok := idempotency.AttemptFrom(ctx)
			if !ok {
				return idempotency.Result{}, errors.New("no attempt in the context")
			}
			if err := a.Step(ctx, "charge", func(context.Context) error { charged.Add(1); return nil }); err != nil {
				return idempotency.Result{}, err
			}
			if err := a.Step(ctx, "ship", func(context.Context) error {
				if fail {
					return shipFails
				}
				shipped.Add(1)
				return nil
			}); err != nil {
				return idempotency.Result{}, err
			}
			return result("charged and shipped"), nil
		}
	}
	if _, err := leased.Do(ctx, key(t), fp, work(true)); !errors.Is(err, shipFails) {
		t.Fatalf("first attempt = %v", err)
	}
	if rec, _, _ := h.Store.Lookup(ctx, key(t)); rec.RecoveryPoint != "charge" {
		t.Fatalf("recovery point %q after the failed attempt, want charge", rec.RecoveryPoint)
	}
	res, err := leased.Do(ctx, key(t), fp, work(false))
	if err != nil || string(res.Body) != "charged and shipped" {
		t.Fatalf("retry = %+v, %v", res, err)
	}
	if charged.Load() != 1 || shipped.Load() != 1 {
		t.Fatalf("charged %d, shipped %d; want each once", charged.Load(), shipped.Load())
	}
}

func testPutFenced(t *testing.T, h Harness) {
	if err := h.Store.PutFenced(ctx, key(t), fp, 5, result("five")); err != nil {
		t.Fatal(err)
	}
	var fe *fencedlock.FencedError
	if err := h.Store.PutFenced(ctx, key(t), fp, 4, result("four")); !errors.As(err, &fe) || fe.Presented != 4 || fe.Required != 5 {
		t.Fatalf("stale PutFenced = %v, want FencedError{4, 5}", err)
	}
	if err := h.Store.PutFenced(ctx, key(t), fp, 6, result("six")); err != nil {
		t.Fatal(err)
	}
	rec, found, err := h.Store.Lookup(ctx, key(t))
	if err != nil || !found || rec.Token != 6 || string(rec.Result.Body) != "six" || rec.State != idempotency.Done {
		t.Fatalf("Lookup = %+v, %v, %v", rec, found, err)
	}
}

// The fenced read stamps the record with its token, a placeholder for a
// new key: a holder that read before it can no longer store a result.
func testReadFenced(t *testing.T, h Harness) {
	rec, err := h.Store.ReadFenced(ctx, key(t), fp, 4)
	if err != nil || rec.State != idempotency.Running || rec.Token != 4 {
		t.Fatalf("first fenced read = %+v, %v; want a running placeholder with token 4", rec, err)
	}
	if rec, err = h.Store.ReadFenced(ctx, key(t), fp, 5); err != nil || rec.State != idempotency.Running {
		t.Fatalf("newer fenced read = %+v, %v", rec, err)
	}
	var fe *fencedlock.FencedError
	if err := h.Store.PutFenced(ctx, key(t), fp, 4, result("stale")); !errors.As(err, &fe) || fe.Presented != 4 || fe.Required != 5 {
		t.Fatalf("PutFenced of the older reader = %v, want FencedError{4, 5}", err)
	}
	if _, err := h.Store.ReadFenced(ctx, key(t), fp, 3); !errors.As(err, &fe) || fe.Required != 5 {
		t.Fatalf("a stale fenced read = %v, want FencedError{3, 5}", err)
	}
	if err := h.Store.DropFenced(ctx, key(t), 4); !errors.As(err, &fe) {
		t.Fatalf("DropFenced of the older reader = %v, want a FencedError", err)
	}
	if err := h.Store.DropFenced(ctx, key(t), 5); err != nil {
		t.Fatal(err)
	}
	if _, found, err := h.Store.Lookup(ctx, key(t)); err != nil || found {
		t.Fatalf("the dropped placeholder is still there (found %v, %v)", found, err)
	}
	if _, err := h.Store.ReadFenced(ctx, key(t), fp, 6); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.PutFenced(ctx, key(t), fp, 6, result("six")); err != nil {
		t.Fatal(err)
	}
	rec, err = h.Store.ReadFenced(ctx, key(t), fp, 7)
	if err != nil || rec.State != idempotency.Done || string(rec.Result.Body) != "six" {
		t.Fatalf("fenced read of a done key = %+v, %v; want its result", rec, err)
	}
	if err := h.Store.DropFenced(ctx, key(t), 7); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := h.Store.Lookup(ctx, key(t)); rec.State != idempotency.Done {
		t.Fatalf("DropFenced removed a stored result: %+v", rec)
	}
}

// exact is a result whose every byte must come back as it was: header
// values that are not UTF-8 (HTTP's obs-text) or hold a NUL, a header
// present without a value, several values, a body of any bytes.
var exact = idempotency.Result{
	Status: http.StatusCreated,
	Header: http.Header{
		"Content-Disposition": {"attachment; filename=\"caf\xe9.pdf\""},
		"X-Nul":               {"a\x00b"},
		"Content-Type":        {},
		"Vary":                {"Accept-Encoding", "Accept-Language"},
		"X-Json":              {`{"a":"<b>&"}`},
	},
	Body: []byte("\x00\xff\xfe binary"),
}

func sameExactly(a, b idempotency.Result) bool {
	if a.Status != b.Status || !bytes.Equal(a.Body, b.Body) || len(a.Header) != len(b.Header) {
		return false
	}
	for k, v := range a.Header {
		w, ok := b.Header[k]
		if !ok || len(v) != len(w) {
			return false
		}
		for i := range v {
			if v[i] != w[i] {
				return false
			}
		}
	}
	return true
}

func testExactResults(t *testing.T, h Harness) {
	k := key(t)
	ret := func(context.Context) (idempotency.Result, error) { return exact, nil }
	if _, err := h.Store.Do(ctx, k, fp, ret); err != nil {
		t.Fatal(err)
	}
	if res, err := h.Store.Do(ctx, k, fp, mustNotRun(t)); err != nil || !res.Replayed || !sameExactly(res, exact) {
		t.Fatalf("replay = %+v, %v; want %+v", res, err, exact)
	}

	leased := idempotency.Key{Tenant: k.Tenant, ID: k.ID + "/leased"}
	l, _, err := h.Store.Claim(ctx, leased, fp, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Complete(ctx, l, exact); err != nil {
		t.Fatal(err)
	}
	if _, res, err := h.Store.Claim(ctx, leased, fp, time.Minute); err != nil || res == nil || !sameExactly(*res, exact) {
		t.Fatalf("leased replay = %+v, %v; want %+v", res, err, exact)
	}

	fenced := idempotency.Key{Tenant: k.Tenant, ID: k.ID + "/fenced"}
	if err := h.Store.PutFenced(ctx, fenced, fp, 1, exact); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := h.Store.Lookup(ctx, fenced); err != nil || !sameExactly(rec.Result, exact) {
		t.Fatalf("fenced record = %+v, %v; want %+v", rec.Result, err, exact)
	}
}
