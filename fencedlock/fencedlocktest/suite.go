// Package fencedlocktest is the behaviour suite every fencedlock.Store must
// pass, in the manner of testing/slogtest: the memory and PostgreSQL backends
// run it, and so can any other implementation. The tests of an optional
// ability (fencedlock.ValueStore, MultiStore, Lister, Watcher) run when the
// store has it, and are skipped otherwise.
package fencedlocktest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// Harness is a store under test and control of its clock.
type Harness struct {
	Store fencedlock.Store
	// TTL is the lease used by tests that let leases expire: short on a
	// real clock (a few hundred milliseconds), anything on a manual one.
	TTL time.Duration
	// Advance lets d pass on the store's clock: it moves a manual clock
	// forward, or sleeps when the store uses a real one.
	Advance func(d time.Duration)
}

// Run runs the suite; newHarness is called once per subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"AcquireFreeLock", testAcquireFree},
		{"HeldElsewhere", testHeldElsewhere},
		{"TokensIncreaseAcrossReleaseAndExpiry", testTokensIncrease},
		{"RenewKeepsTokenAndNeverRevives", testRenew},
		{"StaleClientCannotReleaseOrRenew", testStaleRelease},
		{"ReleaseFreesAtOnce", testReleaseFrees},
		{"ForceReleaseFromHolder", testForceRelease},
		{"BadInputWritesNothing", testBadInput},
		{"ConcurrentContention", testConcurrent},
		{"WaitForBusyLock", testWait},
		{"ValueSetAtGrantChangedByHolderOnly", testValue},
		{"ValueTooLargeWritesNothing", testValueTooLarge},
		{"AcquireAllOrNothing", testAcquireAll},
		{"AcquireAllBadInputWritesNothing", testAcquireAllBadInput},
		{"AcquireAllOverlappingSets", testAcquireAllOverlapping},
		{"ListHeldLocks", testList},
		{"WatcherSeesChanges", testWatcher},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newHarness(t))
		})
	}
}

var ctx = context.Background()

func name(t *testing.T) string { return "lock/" + t.Name() }

func mustAcquire(t *testing.T, s fencedlock.Store, lock, holder string, ttl time.Duration) fencedlock.Lease {
	t.Helper()
	l, err := s.Acquire(ctx, lock, holder, ttl)
	if err != nil {
		t.Fatalf("Acquire(%q, %q): %v", lock, holder, err)
	}
	return l
}

// expire lets lease expire on the store's clock and waits until the store
// agrees it is free.
func expire(t *testing.T, h Harness, lease fencedlock.Lease) {
	t.Helper()
	h.Advance(lease.TTL + lease.TTL/2)
	for i := 0; ; i++ {
		cur, held, err := h.Store.Holder(ctx, lease.Name)
		if err != nil {
			t.Fatal(err)
		}
		if !held || cur.Token != lease.Token {
			return
		}
		if i == 200 {
			t.Fatalf("lease %d never expired", lease.Token)
		}
		h.Advance(lease.TTL / 10)
	}
}

func testAcquireFree(t *testing.T, h Harness) {
	l := mustAcquire(t, h.Store, name(t), "a", time.Minute)
	if l.Token <= 0 || l.Name != name(t) || l.Holder != "a" || l.TTL != time.Minute {
		t.Fatalf("lease = %+v", l)
	}
	cur, held, err := h.Store.Holder(ctx, name(t))
	if err != nil || !held || cur.Holder != "a" || cur.Token != l.Token {
		t.Fatalf("Holder = %+v, %v, %v; want a/%d", cur, held, err, l.Token)
	}
	if _, held, _ := h.Store.Holder(ctx, name(t)+"/other"); held {
		t.Fatal("an unrelated lock is held")
	}
}

func testHeldElsewhere(t *testing.T, h Harness) {
	l := mustAcquire(t, h.Store, name(t), "a", time.Minute)
	for _, holder := range []string{"b", "a"} {
		_, err := h.Store.Acquire(ctx, name(t), holder, time.Minute)
		var held *fencedlock.HeldError
		if !errors.As(err, &held) || !errors.Is(err, fencedlock.ErrHeld) {
			t.Fatalf("Acquire by %s while held: %v, want *HeldError", holder, err)
		}
		if held.Holder != "a" || held.Token != l.Token {
			t.Fatalf("HeldError = %+v, want holder a token %d", held, l.Token)
		}
	}
}

func testTokensIncrease(t *testing.T, h Harness) {
	var last int64
	for i := 0; i < 6; i++ {
		l := mustAcquire(t, h.Store, name(t), fmt.Sprintf("c%d", i), h.TTL)
		if l.Token <= last {
			t.Fatalf("token %d after %d", l.Token, last)
		}
		last = l.Token
		if i%2 == 0 {
			if err := h.Store.Release(ctx, l); err != nil {
				t.Fatal(err)
			}
		} else {
			expire(t, h, l)
		}
	}
}

func testRenew(t *testing.T, h Harness) {
	l := mustAcquire(t, h.Store, name(t), "a", h.TTL)
	h.Advance(h.TTL / 2)
	r, err := h.Store.Renew(ctx, l)
	if err != nil {
		t.Fatalf("Renew: %v", err)
	}
	if r.Token != l.Token || !r.Expires.After(l.Expires) {
		t.Fatalf("renewed %+v from %+v: want same token, later expiry", r, l)
	}
	if cur, held, _ := h.Store.Holder(ctx, name(t)); !held || cur.Token != l.Token || !cur.Expires.Equal(r.Expires) {
		t.Fatalf("after renewal the holder is %+v (held %v), want %+v", cur, held, r)
	}
	expire(t, h, r)
	if _, err := h.Store.Renew(ctx, r); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Renew of expired lease: %v, want ErrNotHeld", err)
	}
	if _, held, _ := h.Store.Holder(ctx, name(t)); held {
		t.Fatal("a failed renewal revived the lease")
	}
}

// The reference design's second verification test.
func testStaleRelease(t *testing.T, h Harness) {
	a := mustAcquire(t, h.Store, name(t), "client-a", h.TTL)
	expire(t, h, a)
	b := mustAcquire(t, h.Store, name(t), "client-b", time.Minute)
	if b.Token <= a.Token {
		t.Fatalf("b's token %d not above a's %d", b.Token, a.Token)
	}
	if err := h.Store.Release(ctx, a); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("stale Release: %v, want ErrNotHeld", err)
	}
	if _, err := h.Store.Renew(ctx, a); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("stale Renew: %v, want ErrNotHeld", err)
	}
	// Same holder name, old token: still stale.
	sameName := a
	sameName.Holder = "client-b"
	if err := h.Store.Release(ctx, sameName); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("Release with b's name and a's token: %v, want ErrNotHeld", err)
	}
	cur, held, err := h.Store.Holder(ctx, name(t))
	if err != nil || !held || cur.Holder != "client-b" || cur.Token != b.Token {
		t.Fatalf("holder after stale release = %+v %v %v, want client-b/%d", cur, held, err, b.Token)
	}
}

func testReleaseFrees(t *testing.T, h Harness) {
	a := mustAcquire(t, h.Store, name(t), "a", time.Minute)
	if err := h.Store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Release(ctx, a); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	b := mustAcquire(t, h.Store, name(t), "b", time.Minute)
	if b.Token <= a.Token {
		t.Fatalf("token %d after %d", b.Token, a.Token)
	}
}

// An administrator frees a lock whose holder is stuck: the lease that Holder
// returns can be released (not renewed), and only while it is current.
func testForceRelease(t *testing.T, h Harness) {
	a := mustAcquire(t, h.Store, name(t), "stuck", time.Minute)
	cur, held, err := h.Store.Holder(ctx, name(t))
	if err != nil || !held || cur.Token != a.Token {
		t.Fatalf("Holder = %+v, %v, %v", cur, held, err)
	}
	if _, err := h.Store.Renew(ctx, cur); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Fatalf("Renew of Holder's lease (no TTL) = %v, want ErrInvalid", err)
	}
	if err := h.Store.Release(ctx, cur); err != nil {
		t.Fatalf("Release of Holder's lease = %v", err)
	}
	if _, held, _ := h.Store.Holder(ctx, name(t)); held {
		t.Fatal("the forced release left the lock held")
	}
	b := mustAcquire(t, h.Store, name(t), "b", time.Minute)
	if b.Token <= a.Token {
		t.Fatalf("token %d after %d", b.Token, a.Token)
	}
	// A stale copy frees nothing: b holds a newer tenure.
	if err := h.Store.Release(ctx, cur); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("second forced release = %v, want ErrNotHeld", err)
	}
	if now, held, _ := h.Store.Holder(ctx, name(t)); !held || now.Token != b.Token {
		t.Fatalf("holder after a stale forced release = %+v (held %v), want b", now, held)
	}
}

func testBadInput(t *testing.T, h Harness) {
	long := strings.Repeat("x", fencedlock.MaxNameLen+1)
	cases := []struct {
		lock, holder string
		ttl          time.Duration
	}{
		{"", "a", time.Second},
		{long, "a", time.Second},
		{name(t), "", time.Second},
		{name(t), long, time.Second},
		{name(t), "a", 0},
		{name(t), "a", -time.Second},
		{name(t), "a", time.Microsecond},
		{name(t), "a", fencedlock.MaxTTL + time.Second},
		{name(t) + "\x00", "a", time.Second},
		{name(t), "\xff\xfe", time.Second},
	}
	for _, c := range cases {
		if _, err := h.Store.Acquire(ctx, c.lock, c.holder, c.ttl); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("Acquire(%.20q, %.20q, %v) = %v, want ErrInvalid", c.lock, c.holder, c.ttl, err)
		}
	}
	if _, held, err := h.Store.Holder(ctx, name(t)); err != nil || held {
		t.Fatalf("bad input left a lease: held=%v err=%v", held, err)
	}
	bad := fencedlock.Lease{Name: name(t), Holder: "a", TTL: time.Second}
	if err := h.Store.Release(ctx, bad); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("Release without token = %v, want ErrInvalid", err)
	}
	if _, err := h.Store.Renew(ctx, bad); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Errorf("Renew without token = %v, want ErrInvalid", err)
	}
	// The largest valid input works.
	ok := strings.Repeat("n", fencedlock.MaxNameLen)
	mustAcquire(t, h.Store, ok, strings.Repeat("h", fencedlock.MaxNameLen), fencedlock.MaxTTL)
}

// Many goroutines contend for one lock. While a holder is inside, no other
// holder may be; tokens are unique and increase in the order of grants.
func testConcurrent(t *testing.T, h Harness) {
	const workers, rounds = 16, 12
	var (
		inside   atomic.Int32
		mu       sync.Mutex
		granted  []int64
		overlaps atomic.Int32
		wg       sync.WaitGroup
	)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			for got := 0; got < rounds; {
				l, err := h.Store.Acquire(ctx, name(t), holder, time.Minute)
				if errors.Is(err, fencedlock.ErrHeld) {
					time.Sleep(time.Millisecond)
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				mu.Lock()
				granted = append(granted, l.Token)
				mu.Unlock()
				inside.Add(-1)
				if err := h.Store.Release(ctx, l); err != nil {
					t.Error(err)
					return
				}
				got++
			}
		}()
	}
	wg.Wait()
	if n := overlaps.Load(); n > 0 {
		t.Fatalf("%d moments with two holders inside", n)
	}
	if len(granted) != workers*rounds {
		t.Fatalf("granted %d leases, want %d", len(granted), workers*rounds)
	}
	for i := 1; i < len(granted); i++ {
		if granted[i] <= granted[i-1] {
			t.Fatalf("grant %d has token %d after %d", i, granted[i], granted[i-1])
		}
	}
}

func testWait(t *testing.T, h Harness) {
	a := mustAcquire(t, h.Store, name(t), "a", time.Minute)
	// Long enough for one attempt to see the lock held on a loaded machine.
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := fencedlock.AcquireWait(wctx, h.Store, name(t), "b", time.Minute, nil); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, fencedlock.ErrHeld) {
		t.Fatalf("AcquireWait on a held lock = %v, want deadline and ErrHeld", err)
	}
	got := make(chan fencedlock.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		wakeups, _ := h.Store.(fencedlock.Wakeups)
		l, err := fencedlock.AcquireWait(ctx, h.Store, name(t), "b", time.Minute,
			&fencedlock.WaitConfig{MinDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond, Wakeups: wakeups})
		got <- l
		errc <- err
	}()
	if err := h.Store.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if err := <-errc; err != nil || l.Holder != "b" || l.Token <= a.Token {
			t.Fatalf("AcquireWait = %+v, %v", l, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("waiter never acquired the released lock")
	}
}
