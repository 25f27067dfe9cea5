package fencedlock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// countingStore counts the renewals and releases that reach a store.
type countingStore struct {
	fencedlock.Store
	renews, releases atomic.Int32
}

func (s *countingStore) Renew(ctx context.Context, l fencedlock.Lease) (fencedlock.Lease, error) {
	s.renews.Add(1)
	return s.Store.Renew(ctx, l)
}

func (s *countingStore) Release(ctx context.Context, l fencedlock.Lease) error {
	s.releases.Add(1)
	return s.Store.Release(ctx, l)
}

// An interval at or above TTL − Margin would reach the margin before its
// first renewal: Keep refuses it, and NewLocker refuses it before any lock.
func TestKeepRejectsConfigsThatNeverRenew(t *testing.T) {
	t.Parallel()
	const ttl = 3 * time.Second // default margin 600ms, default interval 1s
	bad := []fencedlock.KeepaliveConfig{
		{Interval: time.Hour},
		{Interval: ttl},
		{Interval: ttl - ttl/5}, // exactly TTL − the default margin
		{Margin: 2 * time.Second, Interval: time.Second},
		{Margin: ttl},
		{Margin: time.Hour},
		{Interval: -time.Second},
		{Margin: -time.Second},
	}
	store := newMemory(t, nil)
	for _, cfg := range bad {
		lease, err := store.Acquire(ctx, "kept", "a", ttl)
		if err != nil {
			t.Fatal(err)
		}
		if k, err := fencedlock.Keep(ctx, store, lease, &cfg); !errors.Is(err, fencedlock.ErrInvalid) || k != nil {
			t.Errorf("Keep(%+v) = %v, %v; want ErrInvalid", cfg, k, err)
		}
		if err := store.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
		if l, err := fencedlock.NewLocker(store, &fencedlock.LockerConfig{TTL: ttl, Keepalive: &cfg}); !errors.Is(err, fencedlock.ErrInvalid) || l != nil {
			t.Errorf("NewLocker(%+v) = %v, %v; want ErrInvalid", cfg, l, err)
		}
	}
	for _, cfg := range []fencedlock.KeepaliveConfig{
		{},
		{Interval: ttl - ttl/5 - time.Millisecond},
		{Margin: 2 * time.Second, Interval: 999 * time.Millisecond},
		{NoRenew: true},
		{MaxRenewals: -1},
	} {
		if err := cfg.Validate(ttl); err != nil {
			t.Errorf("Validate(%+v) = %v", cfg, err)
		}
	}
	lease, _ := store.Acquire(ctx, "kept", "a", ttl)
	if _, err := fencedlock.Keep(ctx, nil, lease, nil); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("Keep with a nil store = %v, want ErrInvalid", err)
	}
	if _, err := fencedlock.Keep(ctx, store, fencedlock.Lease{Name: "kept", Holder: "a"}, nil); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("Keep of a lease without token = %v, want ErrInvalid", err)
	}
}

// NoRenew is the way to turn renewal off: the context ends at the margin
// with ErrMaxRenewals, and nothing is renewed.
func TestKeepNoRenew(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: newMemory(t, nil)}
	lease, err := store.Acquire(ctx, "once", "a", 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	k, err := fencedlock.Keep(ctx, store, lease, &fencedlock.KeepaliveConfig{NoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	<-k.Context().Done()
	<-k.Done()
	if cause := context.Cause(k.Context()); !errors.Is(cause, fencedlock.ErrMaxRenewals) {
		t.Fatalf("cause = %v, want ErrMaxRenewals", cause)
	}
	if n := store.renews.Load(); n != 0 {
		t.Fatalf("%d renewals with NoRenew", n)
	}
}
