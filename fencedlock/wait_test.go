package fencedlock_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// countingWakeups counts the subscriptions of waiters to another Wakeups.
type countingWakeups struct {
	fencedlock.Wakeups
	n atomic.Int64
}

func (c *countingWakeups) Released(name string) (<-chan struct{}, func()) {
	c.n.Add(1)
	return c.Wakeups.Released(name)
}

// A free lock is acquired without subscribing to wake-ups: on PostgreSQL a
// subscription starts a LISTEN connection, which an acquire that never
// waits must not pay for. A busy one subscribes, and its release ends the
// wait (the delay here is too long for polling to).
func TestAcquireWaitSubscribesOnlyWhenBusy(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	wakeups := &countingWakeups{Wakeups: store}
	cfg := &fencedlock.WaitConfig{MinDelay: time.Hour, Wakeups: wakeups}
	a, err := fencedlock.AcquireWait(ctx, store, "free", "a", time.Minute, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := wakeups.n.Load(); n != 0 {
		t.Fatalf("acquiring a free lock subscribed %d times to wake-ups, want 0", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := fencedlock.AcquireWait(ctx, store, "free", "b", time.Minute, cfg)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for wakeups.n.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("a waiter for a busy lock never subscribed to wake-ups")
		}
		time.Sleep(time.Millisecond)
	}
	if err := store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// AcquireValueWait waits like AcquireWait and grants the lease with its
// value; a value too large is refused before any attempt.
func TestAcquireValueWait(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	a, err := store.Acquire(ctx, "valued", "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan fencedlock.Lease, 1)
	go func() {
		l, err := fencedlock.AcquireValueWait(ctx, store, "valued", "b", time.Minute, "b's", &fencedlock.WaitConfig{MinDelay: time.Hour})
		if err != nil {
			t.Error(err)
		}
		done <- l
	}()
	if err := store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	b := <-done
	cur, _, err := store.Holder(ctx, "valued")
	if err != nil || b.Holder != "b" || b.Value != "b's" || cur.Value != "b's" || cur.Token != b.Token {
		t.Fatalf("lease %+v, holder %+v, %v: want b's with its value", b, cur, err)
	}
	big := make([]byte, fencedlock.MaxValueLen+1)
	if _, err := fencedlock.AcquireValueWait(ctx, store, "other", "c", time.Minute, string(big), nil); !errors.Is(err, fencedlock.ErrValueTooLarge) {
		t.Fatalf("a value too large: %v, want ErrValueTooLarge", err)
	}
	if _, held, _ := store.Holder(ctx, "other"); held {
		t.Fatal("a refused AcquireValueWait took the lock")
	}
}
