package fencedlock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// recovered runs f and returns what it panicked with.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func newLocker(t testing.TB, store fencedlock.Store, cfg *fencedlock.LockerConfig) *fencedlock.Locker {
	t.Helper()
	l, err := fencedlock.NewLocker(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// Work that panics must not leave its lease renewed for nobody: Do stops
// the keepalive and releases the lease before the panic goes on.
func TestLockerReleasesWhenWorkPanics(t *testing.T) {
	t.Parallel()
	store := &countingStore{Store: newMemory(t, nil)}
	locker := newLocker(t, store, &fencedlock.LockerConfig{Holder: "a", TTL: time.Minute,
		Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Millisecond}})
	var workCtx context.Context
	v := recovered(func() {
		locker.Do(ctx, "panicky", func(ctx context.Context, _ fencedlock.Lease) error {
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

func TestLockerDo(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	locker := newLocker(t, store, &fencedlock.LockerConfig{LockPrefix: "jobs/", TTL: time.Minute})
	if _, err := uuid.Parse(locker.Holder()); err != nil || uuid.MustParse(locker.Holder()).Version() != 7 {
		t.Fatalf("default holder %q is not a UUIDv7", locker.Holder())
	}
	var gate fencedlock.Gate
	var ran fencedlock.Lease
	err := locker.Do(ctx, "daily", func(ctx context.Context, l fencedlock.Lease) error {
		ran = l
		return gate.Do(l.Token, func() error { return nil })
	})
	if err != nil || ran.Name != "jobs/daily" || ran.Holder != locker.Holder() {
		t.Fatalf("Do = %v with lease %+v", err, ran)
	}
	if _, held, _ := store.Holder(ctx, "jobs/daily"); held {
		t.Fatal("Do did not release")
	}

	// Busy: TryDo says who holds it, without running fn.
	other, _ := store.Acquire(ctx, "jobs/daily", "other", time.Minute)
	err = locker.TryDo(ctx, "daily", func(context.Context, fencedlock.Lease) error {
		t.Fatal("fn ran without the lock")
		return nil
	})
	var held *fencedlock.HeldError
	if !errors.As(err, &held) || held.Holder != "other" || held.Token != other.Token {
		t.Fatalf("TryDo on a held lock = %v", err)
	}
	// Do waits until ctx ends, and says both.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err = locker.Do(wctx, "daily", func(context.Context, fencedlock.Lease) error {
		t.Fatal("fn ran without the lock")
		return nil
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencedlock.ErrHeld) {
		t.Fatalf("Do on a held lock = %v, want the deadline and ErrHeld", err)
	}
	if err := store.Release(ctx, other); err != nil {
		t.Fatal(err)
	}

	// A newer writer got there first: fn's *FencedError comes back as it is.
	gate.Do(other.Token+100, func() error { return nil })
	err = locker.Do(ctx, "daily", func(ctx context.Context, l fencedlock.Lease) error {
		return gate.Do(l.Token, func() error { return nil })
	})
	var fenced *fencedlock.FencedError
	if !errors.As(err, &fenced) || fenced.Required != other.Token+100 {
		t.Fatalf("fenced Do = %v", err)
	}
	boom := errors.New("boom")
	if err := locker.Do(ctx, "daily", func(context.Context, fencedlock.Lease) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("fn's error = %v", err)
	}
}

// A release that fails is joined to fn's result; one that finds the lease
// gone (it expired under fn) is not an error.
func TestLockerReleaseErrors(t *testing.T) {
	t.Parallel()
	broken := errors.New("connection reset")
	store := &failingRelease{Store: newMemory(t, nil), err: broken}
	locker := newLocker(t, store, &fencedlock.LockerConfig{TTL: time.Minute})
	if err := locker.Do(ctx, "r", func(context.Context, fencedlock.Lease) error { return nil }); !errors.Is(err, broken) {
		t.Fatalf("Do with a failing release = %v", err)
	}
	store.err = fencedlock.ErrNotHeld
	if err := locker.Do(ctx, "r2", func(context.Context, fencedlock.Lease) error { return nil }); err != nil {
		t.Fatalf("Do whose lease was gone at release = %v", err)
	}
}

type failingRelease struct {
	fencedlock.Store
	err error
}

func (s *failingRelease) Release(context.Context, fencedlock.Lease) error { return s.err }

func TestNewLockerRejectsBadConfig(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	if _, err := fencedlock.NewLocker(nil, nil); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("NewLocker(nil) = %v", err)
	}
	for _, cfg := range []fencedlock.LockerConfig{
		{TTL: -time.Second},
		{TTL: fencedlock.MaxTTL + 1},
		{Holder: strings.Repeat("h", fencedlock.MaxNameLen+1)},
		{Holder: "a\x00"},
		{LockPrefix: strings.Repeat("p", fencedlock.MaxNameLen)},
		{LockPrefix: "\xff"},
		{ReleaseTimeout: -time.Second},
		{Wait: &fencedlock.WaitConfig{Jitter: 2}},
		{Wait: &fencedlock.WaitConfig{MinDelay: time.Second, MaxDelay: time.Millisecond}},
		{TTL: time.Second, Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Second}},
	} {
		if _, err := fencedlock.NewLocker(store, &cfg); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("NewLocker(%+v) = %v, want ErrInvalid", cfg, err)
		}
	}
	// A name that the prefix makes too long is refused before any statement.
	locker := newLocker(t, store, &fencedlock.LockerConfig{LockPrefix: "p/"})
	err := locker.Do(ctx, strings.Repeat("n", fencedlock.MaxNameLen-1), func(context.Context, fencedlock.Lease) error {
		t.Fatal("fn ran")
		return nil
	})
	if !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("Do with a too-long name = %v", err)
	}
}

// subscriptions counts the wake-ups waiters ask for.
type subscriptions struct {
	fencedlock.Wakeups
	n atomic.Int32
}

func (s *subscriptions) Released(name string) (<-chan struct{}, func()) {
	s.n.Add(1)
	return s.Wakeups.Released(name)
}

// A lock that is free is acquired without subscribing to wake-ups: for a
// Postgres store with Notify a subscription is a LISTEN on a connection of
// its own, which an uncontended acquire has no use for. A busy one is
// waited for with them.
func TestUncontendedAcquireSubscribesNothing(t *testing.T) {
	t.Parallel()
	store := newMemory(t, nil)
	wake := &subscriptions{Wakeups: store}
	locker := newLocker(t, store, &fencedlock.LockerConfig{TTL: time.Minute, Wait: &fencedlock.WaitConfig{Wakeups: wake}})
	for range 3 {
		if err := locker.Do(ctx, "free", func(context.Context, fencedlock.Lease) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n := wake.n.Load(); n != 0 {
		t.Fatalf("%d subscriptions for 3 acquires of a free lock, want 0", n)
	}
	held, err := store.Acquire(ctx, "busy", "other", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- locker.Do(ctx, "busy", func(context.Context, fencedlock.Lease) error { return nil })
	}()
	for wake.n.Load() == 0 {
		time.Sleep(time.Millisecond) // until the waiter, refused, subscribes
	}
	if err := store.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// attemptsAll counts a MultiStore's AcquireAll calls.
type attemptsAll struct {
	*fencedlock.Memory
	n atomic.Int32
}

func (s *attemptsAll) AcquireAll(ctx context.Context, names []string, holder string, ttl time.Duration) ([]fencedlock.Lease, error) {
	s.n.Add(1)
	return s.Memory.AcquireAll(ctx, names, holder, ttl)
}

// attemptsEach counts a plain Store's Acquire calls: it has no AcquireAll.
type attemptsEach struct {
	fencedlock.Store
	n atomic.Int32
}

func (s *attemptsEach) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (fencedlock.Lease, error) {
	s.n.Add(1)
	return s.Store.Acquire(ctx, name, holder, ttl)
}

// DoAll runs fn with each name's lease and releases them all. On a
// MultiStore it waits for a held name holding none of the others, so that
// another holder can take them meanwhile; on a plain Store it takes the
// names one by one in sorted order, holding those before the one it waits
// for.
func TestLockerDoAll(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		store    func(*fencedlock.Memory) (fencedlock.Store, *atomic.Int32)
		holdsOne bool // waiting for p/b, it holds p/a
	}{
		{"all at once", func(m *fencedlock.Memory) (fencedlock.Store, *atomic.Int32) {
			s := &attemptsAll{Memory: m}
			return s, &s.n
		}, false},
		{"one by one", func(m *fencedlock.Memory) (fencedlock.Store, *atomic.Int32) {
			s := &attemptsEach{Store: m}
			return s, &s.n
		}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			mem := newMemory(t, nil)
			store, attempts := c.store(mem)
			locker := newLocker(t, store, &fencedlock.LockerConfig{Holder: "me", LockPrefix: "p/", TTL: time.Minute,
				Wait: &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}})
			names := []string{"c", "a", "b"}
			err := locker.DoAll(ctx, names, func(_ context.Context, leases []fencedlock.Lease) error {
				for i, l := range leases {
					cur, held, err := mem.Holder(ctx, "p/"+names[i])
					if l.Name != "p/"+names[i] || err != nil || !held || cur.Holder != "me" || cur.Token != l.Token {
						t.Errorf("lease %d = %+v, the store's %+v (held %v, %v)", i, l, cur, held, err)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, n := range names {
				if cur, held, _ := mem.Holder(ctx, "p/"+n); held {
					t.Fatalf("after DoAll p/%s is held: %+v", n, cur)
				}
			}

			other, err := mem.Acquire(ctx, "p/b", "other", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			before := attempts.Load()
			done := make(chan error, 1)
			go func() {
				done <- locker.DoAll(ctx, []string{"b", "a"}, func(context.Context, []fencedlock.Lease) error { return nil })
			}()
			waitFor(t, 30*time.Second, func() bool { return attempts.Load() >= before+3 })
			cur, held, err := mem.Holder(ctx, "p/a")
			if err != nil || held != c.holdsOne || (held && cur.Holder != "me") {
				t.Fatalf("while DoAll waits for p/b, p/a held %v (%+v, %v), want %v", held, cur, err, c.holdsOne)
			}
			if err := mem.Release(ctx, other); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatalf("DoAll after the release: %v", err)
			}
		})
	}
}

// DoAll refuses a bad set before any attempt, and ends fn's context when
// any one of its leases is lost.
func TestLockerDoAllLosesOne(t *testing.T) {
	t.Parallel()
	mem := newMemory(t, nil)
	store := &attemptsAll{Memory: mem}
	locker := newLocker(t, store, &fencedlock.LockerConfig{Holder: "me", TTL: time.Minute,
		Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Millisecond}})
	for _, names := range [][]string{nil, {"a", "a"}, {"a", ""}} {
		err := locker.DoAll(ctx, names, func(context.Context, []fencedlock.Lease) error {
			t.Fatal("fn ran")
			return nil
		})
		if !errors.Is(err, fencedlock.ErrInvalid) {
			t.Fatalf("DoAll(%q) = %v, want ErrInvalid", names, err)
		}
	}
	if n := store.n.Load(); n != 0 {
		t.Fatalf("%d attempts at bad sets", n)
	}
	err := locker.DoAll(ctx, []string{"x", "y"}, func(ctx context.Context, leases []fencedlock.Lease) error {
		if err := mem.Release(ctx, leases[1]); err != nil { // taken from under it
			return err
		}
		<-ctx.Done()
		if cause := context.Cause(ctx); !errors.Is(cause, fencedlock.ErrLost) {
			t.Errorf("fn's context ended with %v, want ErrLost", cause)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, held, _ := mem.Holder(ctx, "x"); held {
		t.Fatal("x still held after DoAll")
	}
}
