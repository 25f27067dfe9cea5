package fencedlocktest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// The tests of the optional abilities: values on leases, AcquireAll, List
// and Watcher.

func valueStore(t *testing.T, h Harness) fencedlock.ValueStore {
	t.Helper()
	s, ok := h.Store.(fencedlock.ValueStore)
	if !ok {
		t.Skip("the store keeps no values (fencedlock.ValueStore)")
	}
	return s
}

func holderValue(t *testing.T, s fencedlock.Store, lock string) (fencedlock.Lease, bool) {
	t.Helper()
	cur, held, err := s.Holder(ctx, lock)
	if err != nil {
		t.Fatal(err)
	}
	return cur, held
}

// A value is set with the grant, changed by its holder, refused to anyone
// else (another holder, a stale tenure), and never seen by the next tenure.
func testValue(t *testing.T, h Harness) {
	s := valueStore(t, h)
	// The lease outlives the checks before expire on a loaded machine: with
	// h.TTL itself (300ms on PostgreSQL) Holder found it expired.
	a, err := s.AcquireValue(ctx, name(t), "a", 10*h.TTL, "who: a")
	if err != nil {
		t.Fatal(err)
	}
	if a.Value != "who: a" {
		t.Fatalf("AcquireValue's lease has value %q", a.Value)
	}
	if cur, _ := holderValue(t, s, name(t)); cur.Value != "who: a" || cur.Token != a.Token {
		t.Fatalf("Holder = %+v, want a's value", cur)
	}
	binary := "\x00\xff\x01 not text"
	if a, err = s.SetValue(ctx, a, binary); err != nil || a.Value != binary {
		t.Fatalf("SetValue by the holder = %+v, %v", a, err)
	}
	if cur, _ := holderValue(t, s, name(t)); cur.Value != binary {
		t.Fatalf("after SetValue the value is %q", cur.Value)
	}
	forged := a
	forged.Holder = "b"
	if _, err := s.SetValue(ctx, forged, "b was here"); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("SetValue by another holder = %v, want ErrNotHeld", err)
	}
	if _, err := s.SetValue(ctx, fencedlock.Lease{Name: a.Name, Holder: a.Holder, Token: a.Token}, "x"); !errors.Is(err, fencedlock.ErrInvalid) {
		t.Fatalf("SetValue of a lease without TTL = %v, want ErrInvalid", err)
	}
	expire(t, h, a)
	b := mustAcquire(t, s, name(t), "b", time.Minute)
	if cur, _ := holderValue(t, s, name(t)); cur.Value != "" || b.Value != "" {
		t.Fatalf("the next tenure shows value %q (lease %q): the previous tenure's", cur.Value, b.Value)
	}
	if _, err := s.SetValue(ctx, a, "stale"); !errors.Is(err, fencedlock.ErrNotHeld) {
		t.Fatalf("SetValue by the stale tenure = %v, want ErrNotHeld", err)
	}
	if cur, _ := holderValue(t, s, name(t)); cur.Value != "" {
		t.Fatalf("a stale SetValue wrote %q", cur.Value)
	}
	if b, err = s.SetValue(ctx, b, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err = s.SetValue(ctx, b, ""); err != nil {
		t.Fatal(err)
	}
	if cur, _ := holderValue(t, s, name(t)); cur.Value != "" {
		t.Fatalf("SetValue(\"\") left %q", cur.Value)
	}
}

func testValueTooLarge(t *testing.T, h Harness) {
	s := valueStore(t, h)
	big := strings.Repeat("v", fencedlock.MaxValueLen+1)
	check := func(what string, err error) {
		t.Helper()
		var tooLarge *fencedlock.ValueTooLargeError
		if !errors.As(err, &tooLarge) || !errors.Is(err, fencedlock.ErrValueTooLarge) || !errors.Is(err, fencedlock.ErrInvalid) ||
			tooLarge.Size != len(big) || tooLarge.Max != fencedlock.MaxValueLen {
			t.Fatalf("%s of %d bytes = %v, want *ValueTooLargeError matching ErrValueTooLarge and ErrInvalid", what, len(big), err)
		}
	}
	_, err := s.AcquireValue(ctx, name(t), "a", time.Minute, big)
	check("AcquireValue", err)
	if _, held := holderValue(t, s, name(t)); held {
		t.Fatal("a refused AcquireValue left the lock held")
	}
	a, err := s.AcquireValue(ctx, name(t), "a", time.Minute, big[1:])
	if err != nil {
		t.Fatalf("AcquireValue of MaxValueLen bytes: %v", err)
	}
	_, err = s.SetValue(ctx, a, big)
	check("SetValue", err)
	if cur, _ := holderValue(t, s, name(t)); cur.Value != big[1:] {
		t.Fatalf("a refused SetValue changed the value to %d bytes", len(cur.Value))
	}
}

func multiStore(t *testing.T, h Harness) fencedlock.MultiStore {
	t.Helper()
	s, ok := h.Store.(fencedlock.MultiStore)
	if !ok {
		t.Skip("the store has no AcquireAll (fencedlock.MultiStore)")
	}
	return s
}

// heldBy reports which of names holder holds.
func heldBy(t *testing.T, s fencedlock.Store, holder string, names ...string) []string {
	t.Helper()
	var out []string
	for _, n := range names {
		if cur, held := holderValue(t, s, n); held && cur.Holder == holder {
			out = append(out, n)
		}
	}
	return out
}

func testAcquireAll(t *testing.T, h Harness) {
	s := multiStore(t, h)
	n1, n2, n3 := name(t)+"/1", name(t)+"/2", name(t)+"/3"
	b := mustAcquire(t, s, n2, "b", time.Minute)
	_, err := s.AcquireAll(ctx, []string{n3, n2, n1}, "a", time.Minute)
	var held *fencedlock.HeldError
	if !errors.As(err, &held) || held.Name != n2 || held.Holder != "b" || held.Token != b.Token {
		t.Fatalf("AcquireAll with %s held = %v, want *HeldError naming it", n2, err)
	}
	if got := heldBy(t, s, "a", n1, n2, n3); len(got) > 0 {
		t.Fatalf("a failed AcquireAll left %v held", got)
	}
	if err := s.Release(ctx, b); err != nil {
		t.Fatal(err)
	}
	names := []string{n3, n1, n2}
	leases, err := s.AcquireAll(ctx, names, "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[int64]bool{}
	for i, l := range leases {
		if l.Name != names[i] || l.Holder != "a" || l.TTL != time.Minute || l.Token <= b.Token || tokens[l.Token] {
			t.Fatalf("lease %d = %+v, want %s for a, with a token of its own above %d", i, l, names[i], b.Token)
		}
		tokens[l.Token] = true
		if cur, _ := holderValue(t, s, l.Name); cur.Token != l.Token {
			t.Fatalf("%s is held with token %d, not %d", l.Name, cur.Token, l.Token)
		}
	}
	if _, err := s.AcquireAll(ctx, []string{n1}, "c", time.Minute); !errors.Is(err, fencedlock.ErrHeld) {
		t.Fatalf("AcquireAll of a held name = %v, want ErrHeld", err)
	}
	for _, l := range leases {
		if err := s.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}

func testAcquireAllBadInput(t *testing.T, h Harness) {
	s := multiStore(t, h)
	ok := name(t) + "/ok"
	tooMany := make([]string, fencedlock.MaxAcquireAll+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("%s/%d", name(t), i)
	}
	for _, c := range []struct {
		names  []string
		holder string
		ttl    time.Duration
	}{
		{nil, "a", time.Second},
		{[]string{ok, ok}, "a", time.Second},
		{[]string{ok, ""}, "a", time.Second},
		{[]string{ok, name(t) + "\x00"}, "a", time.Second},
		{[]string{ok}, "", time.Second},
		{[]string{ok}, "a", 0},
		{tooMany, "a", time.Second},
	} {
		if _, err := s.AcquireAll(ctx, c.names, c.holder, c.ttl); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("AcquireAll(%d names, %q, %v) = %v, want ErrInvalid", len(c.names), c.holder, c.ttl, err)
		}
	}
	if got := heldBy(t, s, "a", append(tooMany, ok)...); len(got) > 0 {
		t.Fatalf("bad input left %v held", got)
	}
	if _, err := s.AcquireAll(ctx, tooMany[:fencedlock.MaxAcquireAll], "a", time.Minute); err != nil {
		t.Fatalf("AcquireAll of MaxAcquireAll names: %v", err)
	}
}

// Clients acquire overlapping sets of names, each in its own order, all at
// once: an AcquireAll either takes its whole set, which no other client holds
// any part of while it has it, or fails with a *HeldError naming a name of
// its set and holds nothing. No other error (a deadlock) occurs.
func testAcquireAllOverlapping(t *testing.T, h Harness) {
	s := multiStore(t, h)
	const clients, rounds, names = 6, 25, 6
	pool := make([]string, names)
	for i := range pool {
		pool[i] = fmt.Sprintf("%s/%d", name(t), i)
	}
	var (
		mu     sync.Mutex
		inside = map[string]string{} // name → the client holding it
		wg     sync.WaitGroup
		taken  int
	)
	for c := range clients {
		wg.Go(func() {
			me := fmt.Sprintf("client-%d", c)
			rng := rand.New(rand.NewPCG(uint64(c), 29))
			for range rounds {
				set := append([]string(nil), pool...)
				rng.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
				set = set[:2+rng.IntN(3)]
				leases, err := s.AcquireAll(ctx, set, me, time.Minute)
				if err != nil {
					var held *fencedlock.HeldError
					if !errors.As(err, &held) || !slices.Contains(set, held.Name) {
						t.Errorf("%s: AcquireAll(%v) = %v, want a *HeldError naming one of them", me, set, err)
						return
					}
					if got := heldBy(t, s, me, set...); len(got) > 0 {
						t.Errorf("%s: a failed AcquireAll left %v held", me, got)
						return
					}
					continue
				}
				mu.Lock()
				for _, n := range set {
					if other, ok := inside[n]; ok {
						t.Errorf("%s and %s both hold %s", me, other, n)
					}
					inside[n] = me
				}
				taken++
				mu.Unlock()
				// Inside: the store says so too, until the names are left.
				for _, l := range leases {
					if cur, held := holderValue(t, s, l.Name); !held || cur.Token != l.Token {
						t.Errorf("%s: %s is held by %+v (held %v), not with token %d", me, l.Name, cur, held, l.Token)
					}
				}
				mu.Lock()
				for _, n := range set {
					delete(inside, n)
				}
				mu.Unlock()
				for _, l := range leases {
					if err := s.Release(ctx, l); err != nil {
						t.Errorf("%s: release %s: %v", me, l.Name, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if taken == 0 {
		t.Fatal("no AcquireAll succeeded: the test proved nothing")
	}
}

func testList(t *testing.T, h Harness) {
	lister, ok := h.Store.(fencedlock.Lister)
	if !ok {
		t.Skip("the store lists nothing (fencedlock.Lister)")
	}
	p := name(t) + "/"
	var values fencedlock.ValueStore
	values, _ = h.Store.(fencedlock.ValueStore)
	want := map[string]fencedlock.Lease{}
	for i, n := range []string{"c", "a", "d", "b"} {
		var l fencedlock.Lease
		var err error
		if values != nil && i%2 == 0 {
			l, err = values.AcquireValue(ctx, p+n, "h-"+n, time.Minute, "value of "+n)
		} else {
			l, err = h.Store.Acquire(ctx, p+n, "h-"+n, time.Minute)
		}
		if err != nil {
			t.Fatal(err)
		}
		want[l.Name] = l
	}
	released := mustAcquire(t, h.Store, p+"released", "r", time.Minute)
	if err := h.Store.Release(ctx, released); err != nil {
		t.Fatal(err)
	}
	mustAcquire(t, h.Store, name(t)+"-other/x", "o", time.Minute) // another prefix
	expired := mustAcquire(t, h.Store, p+"expired", "e", h.TTL)
	expire(t, h, expired)

	var got []fencedlock.Holding
	q := fencedlock.ListQuery{Prefix: p, Limit: 3}
	for pages := 0; ; pages++ {
		page, err := lister.List(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Locks) > q.Limit || page.Now.IsZero() {
			t.Fatalf("page %d: %d locks (limit %d), now %v", pages, len(page.Locks), q.Limit, page.Now)
		}
		for _, l := range page.Locks {
			if !l.Expires.After(page.Now) || l.Since.After(page.Now) {
				t.Errorf("%s: since %v, expires %v, now %v", l.Name, l.Since, l.Expires, page.Now)
			}
		}
		got = append(got, page.Locks...)
		if page.Next == "" {
			break
		}
		if pages > 3 {
			t.Fatal("List never ends")
		}
		q.After = page.Next
	}
	var names []string
	for _, l := range got {
		names = append(names, l.Name)
		w := want[l.Name]
		if l.Holder != w.Holder || l.Token != w.Token || l.Value != w.Value {
			t.Errorf("listed %+v, want %+v", l.Lease, w)
		}
	}
	if wantNames := []string{p + "a", p + "b", p + "c", p + "d"}; !slices.Equal(names, wantNames) {
		t.Fatalf("listed %v, want %v", names, wantNames)
	}
	for _, q := range []fencedlock.ListQuery{{Limit: -1}, {Limit: fencedlock.MaxListLimit + 1}, {Prefix: "\xff"}, {After: strings.Repeat("x", 256)}} {
		if _, err := lister.List(ctx, q); !errors.Is(err, fencedlock.ErrInvalid) {
			t.Errorf("List(%+v) = %v, want ErrInvalid", q, err)
		}
	}
}

// A watcher is woken by a grant with a value, a change of value and a
// release.
func testWatcher(t *testing.T, h Harness) {
	w, ok := h.Store.(fencedlock.Watcher)
	s, isValued := h.Store.(fencedlock.ValueStore)
	if !ok || !isValued {
		t.Skip("the store has no watchers (fencedlock.Watcher) or no values")
	}
	if ch, stop := w.Changed(name(t)); ch == nil {
		stop()
		t.Skip("this store sends no notices: its watchers poll")
	} else {
		stop()
	}
	var lease fencedlock.Lease
	for _, step := range []struct {
		what string
		do   func() error
	}{
		{"AcquireValue", func() (err error) { lease, err = s.AcquireValue(ctx, name(t), "a", time.Minute, "one"); return err }},
		{"SetValue", func() (err error) { lease, err = s.SetValue(ctx, lease, "two"); return err }},
		{"Release", func() error { return s.Release(ctx, lease) }},
	} {
		ch, stop := w.Changed(name(t))
		if err := step.do(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
			t.Fatalf("no notice of %s", step.what)
		}
		stop()
	}
}
