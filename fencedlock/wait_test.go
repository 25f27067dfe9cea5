package fencedlock_test

import (
	"context"
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

// cancelingStore cancels a context at its n-th Acquire, before it runs.
type cancelingStore struct {
	fencedlock.Store
	n      int
	cancel context.CancelFunc
	calls  atomic.Int64
}

func (s *cancelingStore) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (fencedlock.Lease, error) {
	if s.calls.Add(1) == int64(s.n) {
		s.cancel()
	}
	return s.Store.Acquire(ctx, name, holder, ttl)
}

// A wait whose ctx ends during an attempt, after the lock was found held,
// reports both: ctx's cause and the holder. The first refusal counts too:
// a wait that ends during its second attempt has seen one.
func TestAcquireWaitCanceledReportsHolder(t *testing.T) {
	t.Parallel()
	for _, n := range []int{2, 3} {
		mem := newMemory(t, nil)
		if _, err := mem.Acquire(ctx, "busy", "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		store := &cancelingStore{Store: mem, n: n, cancel: cancel}
		_, err := fencedlock.AcquireWait(wctx, store, "busy", "b", time.Minute, &fencedlock.WaitConfig{MinDelay: time.Millisecond})
		cancel()
		var held *fencedlock.HeldError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &held) || held.Holder != "a" {
			t.Errorf("wait canceled during attempt %d: %v, want context.Canceled and a's *HeldError", n, err)
		}
	}
}
