package fencedlock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// recovered runs f and returns what it panicked with.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// Work that panics must not leave its lease renewed for nobody: Guard stops
// the keepalive and releases the lease before the panic goes on.
func TestGuardReleasesWhenWorkPanics(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: fencedlock.NewMemory(nil)}
	var workCtx context.Context
	v := recovered(func() {
		fencedlock.Guard(ctx, store, "panicky", "a", time.Minute,
			&fencedlock.GuardConfig{Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Millisecond}},
			func(ctx context.Context, _ fencedlock.Lease) error {
				workCtx = ctx
				panic("boom")
			})
	})
	if v != "boom" {
		t.Fatalf("recovered %v, want the work's panic", v)
	}
	if cur, held, err := store.Holder(ctx, "panicky"); err != nil || held {
		t.Fatalf("after the panic the lock is held by %+v (%v): nobody releases it", cur, err)
	}
	if n := store.releases.Load(); n != 1 {
		t.Fatalf("%d releases, want 1", n)
	}
	// The keepalive has stopped (Stop waits for its goroutine): no renewal
	// can follow.
	if cause := context.Cause(workCtx); !errors.Is(cause, fencedlock.ErrStopped) {
		t.Fatalf("work's context cause = %v, want ErrStopped", cause)
	}
	if _, err := store.Acquire(ctx, "panicky", "b", time.Minute); err != nil {
		t.Fatalf("another holder cannot take the lock at once: %v", err)
	}
}
