package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
)

// A renewal interval that reaches the end of the safety margin would never
// renew in time: NewLeased refuses it, and other impossible settings.
func TestNewLeasedRejectsUnsafeTimings(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	const ttl = 10 * time.Second
	keep := func(margin, interval time.Duration) *fencedlock.KeepaliveConfig {
		return &fencedlock.KeepaliveConfig{Margin: margin, Interval: interval}
	}
	for _, tc := range []struct {
		name string
		cfg  idempotency.LeasedConfig
		ok   bool
	}{
		{"defaults", idempotency.LeasedConfig{}, true},
		{"renew before the margin", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(2*time.Second, 7*time.Second)}, true},
		{"wide margin, renewal within it", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(9*time.Second, 500*time.Millisecond)}, true},
		{"wide margin, default renewal (TTL/3) past it", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(9*time.Second, 0)}, false},
		{"renew at TTL - margin", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(2*time.Second, 8*time.Second)}, false},
		{"renew at TTL", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(0, ttl)}, false},
		{"renew past TTL - default margin", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(0, 9*time.Second)}, false},
		{"negative renewal", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(0, -time.Second)}, false},
		{"margin of the whole TTL", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(ttl, 0)}, false},
		{"negative margin", idempotency.LeasedConfig{TTL: ttl, Keepalive: keep(-time.Second, 0)}, false},
		{"negative release timeout", idempotency.LeasedConfig{ReleaseTimeout: -time.Second}, false},
		{"TTL over MaxTTL", idempotency.LeasedConfig{TTL: idempotency.MaxTTL + 1}, false},
	} {
		_, err := idempotency.NewLeased(store, &tc.cfg)
		if tc.ok && err != nil || !tc.ok && !errors.Is(err, idempotency.ErrInvalid) {
			t.Errorf("%s: NewLeased(%+v) = %v", tc.name, tc.cfg, err)
		}
	}
}

// An attempt that resumes after a recovery point its steps never reach (a
// renamed step, a branch not taken) skipped all its work: it fails, stores
// nothing, and keeps the recovery point for an operator to see.
func TestLeasedUnreachedRecoveryPointFails(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	leased, err := idempotency.NewLeased(store, &idempotency.LeasedConfig{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	key := idempotency.Key{ID: "renamed step"}
	down := errors.New("carrier down")
	_, err = leased.Do(ctx, key, idempotency.Fingerprint{}, func(ctx context.Context) (idempotency.Result, error) {
		a, _ := idempotency.AttemptFrom(ctx)
		if err := a.Step(ctx, "charge-v1", func(context.Context) error { return nil }); err != nil {
			return idempotency.Result{}, err
		}
		return idempotency.Result{}, down
	})
	if !errors.Is(err, down) {
		t.Fatalf("first attempt = %v", err)
	}
	// The next deployment renamed the step.
	var ran []string
	work := func(ctx context.Context) (idempotency.Result, error) {
		a, _ := idempotency.AttemptFrom(ctx)
		for _, step := range []string{"charge", "ship"} {
			if err := a.Step(ctx, step, func(context.Context) error { ran = append(ran, step); return nil }); err != nil {
				return idempotency.Result{}, err
			}
		}
		return idempotency.Result{Status: 201, Body: []byte("shipped")}, nil
	}
	for range 2 {
		res, err := leased.Do(ctx, key, idempotency.Fingerprint{}, work)
		if !errors.Is(err, idempotency.ErrRecoveryPointNotReached) || res.Status != 0 {
			t.Fatalf("retry past an unknown recovery point = %+v, %v; want ErrRecoveryPointNotReached", res, err)
		}
	}
	rec, found, err := store.Lookup(ctx, key)
	if err != nil || !found || rec.State == idempotency.Done || rec.RecoveryPoint != "charge-v1" {
		t.Fatalf("record after the failed retries = %+v, %v, %v; want not done, recovery point charge-v1", rec, found, err)
	}
	if len(ran) != 0 {
		t.Fatalf("steps %v ran, want none (they were all skipped)", ran)
	}
}

// Work that resumes by itself, with RecoveryPoint and Checkpoint and no
// Step, is not mistaken for an attempt stuck skipping.
func TestLeasedCheckpointWithoutSteps(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	leased, _ := idempotency.NewLeased(store, &idempotency.LeasedConfig{TTL: time.Minute})
	key := idempotency.Key{ID: "manual"}
	down := errors.New("down")
	work := func(fail bool) func(ctx context.Context) (idempotency.Result, error) {
		return func(ctx context.Context) (idempotency.Result, error) {
			a, _ := idempotency.AttemptFrom(ctx)
			if a.RecoveryPoint() == "" {
				if err := a.Checkpoint(ctx, "charged"); err != nil {
					return idempotency.Result{}, err
				}
			}
			if fail {
				return idempotency.Result{}, down
			}
			return idempotency.Result{Status: 200}, nil
		}
	}
	if _, err := leased.Do(ctx, key, idempotency.Fingerprint{}, work(true)); !errors.Is(err, down) {
		t.Fatal(err)
	}
	if res, err := leased.Do(ctx, key, idempotency.Fingerprint{}, work(false)); err != nil || res.Status != 200 {
		t.Fatalf("resumed attempt = %+v, %v", res, err)
	}
}

// A leased attempt whose work panics gives the key up as a failed one does:
// the retry runs at once instead of waiting out the lease.
func TestLeasedPanicReleasesTheKey(t *testing.T) {
	t.Parallel()
	store, _ := idempotency.NewMemory(nil)
	leased, _ := idempotency.NewLeased(store, &idempotency.LeasedConfig{TTL: time.Hour})
	key := idempotency.Key{ID: "panics"}
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the work's panic", p)
			}
		}()
		leased.Do(ctx, key, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
			panic("boom")
		})
	}()
	res, err := leased.Do(ctx, key, idempotency.Fingerprint{}, func(context.Context) (idempotency.Result, error) {
		return idempotency.Result{Status: 200}, nil
	})
	if err != nil || res.Status != 200 {
		t.Fatalf("retry after a panic = %+v, %v; want it to run", res, err)
	}
}
