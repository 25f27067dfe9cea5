// Package leadertest is the behaviour suite of leader elections on a store,
// in the manner of testing/slogtest: leader's tests run it on
// fencedlock.Memory and fencedlock.Postgres, and a store of your own
// (a leader.Store) can run it too.
package leadertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/leader"
)

// Harness is a store under test and control of its clock.
type Harness struct {
	Store leader.Store
	// TTL is the lease of the tests that let a term expire: short on a
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
		{"OneLeaderAtATime", testOneLeader},
		{"ResignHandsOverAtOnce", testResign},
		{"LostLeaseEndsTheTerm", testLost},
		{"ExpiredLeaderIsReplacedAndFenced", testExpired},
		{"ObserveFollowsTheLeader", testObserve},
		{"ProclaimOnlyByTheLeader", testProclaim},
		{"CanceledCampaignHoldsNothing", testCanceled},
		{"BadInputWritesNothing", testBadInput},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, newHarness(t)) })
	}
}

var ctx = context.Background()

// patience bounds every wait of the suite for something that must happen:
// long, for a loaded machine; a passing run never waits it out.
const patience = 30 * time.Second

func electionName(t *testing.T) string { return t.Name() }

// election returns candidate's election of the test's name: a lease of
// ttl, renewed often, observed often.
func election(t *testing.T, h Harness, candidate string, ttl time.Duration) *leader.Election {
	t.Helper()
	e, err := leader.NewElection(h.Store, electionName(t), &leader.Config{
		Holder: candidate, TTL: ttl, ObserveInterval: 10 * time.Millisecond,
		Keepalive: &fencedlock.KeepaliveConfig{Interval: min(ttl/5, 50*time.Millisecond), MaxRenewals: -1},
		Wait:      &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func campaign(t *testing.T, e *leader.Election, value string) *leader.Term {
	t.Helper()
	term, err := e.Campaign(ctx, value)
	if err != nil {
		t.Fatalf("%s: Campaign: %v", e.Holder(), err)
	}
	t.Cleanup(func() { _ = term.Resign(ctx) })
	return term
}

func resign(t *testing.T, term *leader.Term) {
	t.Helper()
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
}

func current(t *testing.T, e *leader.Election) leader.Leader {
	t.Helper()
	l, err := e.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ended waits for the term's context to end and returns its cause.
func ended(t *testing.T, term *leader.Term) error {
	t.Helper()
	select {
	case <-term.Context().Done():
		return context.Cause(term.Context())
	case <-time.After(patience):
		t.Fatalf("term %d: its context did not end", term.Token())
		return nil
	}
}

// Candidates campaign on one election, each several times: one leads at a
// time, and each term is above every term before it, so a Gate admits every
// leader's write.
func testOneLeader(t *testing.T, h Harness) {
	const candidates, rounds = 4, 3
	var (
		mu     sync.Mutex
		inside string
		gate   fencedlock.Gate
		wg     sync.WaitGroup
		terms  int
	)
	for c := range candidates {
		e := election(t, h, fmt.Sprintf("candidate-%d", c), time.Minute)
		wg.Go(func() {
			for range rounds {
				term, err := e.Campaign(ctx, e.Holder())
				if err != nil {
					t.Errorf("%s: Campaign: %v", e.Holder(), err)
					return
				}
				mu.Lock()
				if inside != "" {
					t.Errorf("%s elected while %s leads", e.Holder(), inside)
				}
				inside = e.Holder()
				terms++
				mu.Unlock()
				if err := gate.Do(term.Token(), func() error { return nil }); err != nil {
					t.Errorf("%s: term %d: %v", e.Holder(), term.Token(), err)
				}
				if l, err := e.Leader(ctx); err != nil || l.Holder != e.Holder() || l.Term != term.Token() || l.Value != e.Holder() {
					t.Errorf("%s leads, but Leader says %+v, %v", e.Holder(), l, err)
				}
				mu.Lock()
				inside = ""
				mu.Unlock()
				if err := term.Resign(ctx); err != nil {
					t.Errorf("%s: Resign: %v", e.Holder(), err)
				}
			}
		})
	}
	wg.Wait()
	if terms != candidates*rounds {
		t.Fatalf("%d terms, want %d", terms, candidates*rounds)
	}
}

// Resign releases the lease: a waiting candidate is elected long before the
// resigned term's lease (an hour) would have expired.
func testResign(t *testing.T, h Harness) {
	a := campaign(t, election(t, h, "a", time.Hour), "a")
	b := election(t, h, "b", time.Hour)
	elected := make(chan *leader.Term, 1)
	go func() {
		term, err := b.Campaign(ctx, "b")
		if err != nil {
			t.Error(err)
		}
		elected <- term
	}()
	resign(t, a)
	var bt *leader.Term
	select {
	case bt = <-elected:
	case <-time.After(patience):
		t.Fatal("b was not elected after a resigned")
	}
	if bt == nil {
		return
	}
	defer resign(t, bt)
	if cause := ended(t, a); !errors.Is(cause, leader.ErrResigned) {
		t.Fatalf("a's cause: %v, want ErrResigned", cause)
	}
	if bt.Token() <= a.Token() {
		t.Fatalf("b's term %d not above a's %d", bt.Token(), a.Token())
	}
	if err := a.Resign(ctx); err != nil {
		t.Fatalf("a second Resign: %v", err)
	}
	if l := current(t, b); l.Holder != "b" {
		t.Fatalf("a's second Resign freed b's term: leader %+v", l)
	}
}

// A leader whose lease is taken from it (an operator's forced release, and
// another elected) is told through its term's context: ErrLost.
func testLost(t *testing.T, h Harness) {
	a := campaign(t, election(t, h, "a", time.Minute), "a")
	forced, held, err := h.Store.Holder(ctx, a.Lease().Name)
	if err != nil || !held {
		t.Fatalf("Holder: %+v, %v, %v", forced, held, err)
	}
	if err := h.Store.Release(ctx, forced); err != nil {
		t.Fatal(err)
	}
	b := campaign(t, election(t, h, "b", time.Minute), "b")
	if cause := ended(t, a); !errors.Is(cause, fencedlock.ErrLost) {
		t.Fatalf("a's cause: %v, want fencedlock.ErrLost", cause)
	}
	if a.HeldSafely() {
		t.Fatal("a holds its term safely after losing it")
	}
	if b.Token() <= a.Token() {
		t.Fatalf("b's term %d not above a's %d", b.Token(), a.Token())
	}
}

// A leader that stops renewing (its process stopped) keeps its lease until
// the lease expires; then another is elected, and the resource refuses the
// old leader's late write.
func testExpired(t *testing.T, h Harness) {
	actx, stop := context.WithCancel(ctx)
	a, err := election(t, h, "a", h.TTL).Campaign(actx, "a")
	if err != nil {
		t.Fatal(err)
	}
	stop() // a's renewals stop; its lease stays until it expires
	<-a.Done()
	if cause := context.Cause(a.Context()); !errors.Is(cause, context.Canceled) {
		t.Fatalf("a's cause: %v, want its campaign's", cause)
	}
	var gate fencedlock.Gate
	if err := gate.Do(a.Token(), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	h.Advance(h.TTL + h.TTL/2)
	b := campaign(t, election(t, h, "b", time.Minute), "b")
	if b.Token() <= a.Token() {
		t.Fatalf("b's term %d not above a's %d", b.Token(), a.Token())
	}
	if err := gate.Do(b.Token(), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	wrote := false
	err = gate.Do(a.Token(), func() error { wrote = true; return nil })
	var fenced *fencedlock.FencedError
	if !errors.As(err, &fenced) || wrote || fenced.Required != b.Token() {
		t.Fatalf("the old leader's write: %v (wrote %v), want refused for b's term %d", err, wrote, b.Token())
	}
}

// next reads ch until it reports a leader for which ok holds.
func next(t *testing.T, ch <-chan leader.Leader, what string, ok func(leader.Leader) bool) leader.Leader {
	t.Helper()
	timeout := time.After(patience)
	for {
		select {
		case l, open := <-ch:
			if !open {
				t.Fatalf("Observe ended before %s", what)
			}
			if ok(l) {
				return l
			}
		case <-timeout:
			t.Fatalf("Observe never reported %s", what)
		}
	}
}

// Observe reports the leader as it is, then each change: a new leader, a
// new value, no leader.
func testObserve(t *testing.T, h Harness) {
	octx, stop := context.WithCancel(ctx)
	obs := election(t, h, "observer", time.Minute).Observe(octx)
	if first := next(t, obs, "the first state", func(leader.Leader) bool { return true }); first != (leader.Leader{}) {
		t.Fatalf("first report %+v, want no leader", first)
	}
	a := campaign(t, election(t, h, "a", time.Minute), "a1")
	next(t, obs, "a's election", func(l leader.Leader) bool { return l == leader.Leader{Holder: "a", Term: a.Token(), Value: "a1"} })
	if err := a.Proclaim(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	next(t, obs, "a's new value", func(l leader.Leader) bool { return l == leader.Leader{Holder: "a", Term: a.Token(), Value: "a2"} })
	resign(t, a)
	next(t, obs, "no leader", func(l leader.Leader) bool { return l == leader.Leader{} })
	b := campaign(t, election(t, h, "b", time.Minute), "b1")
	got := next(t, obs, "b's election", func(l leader.Leader) bool { return l.Holder == "b" })
	if got.Term != b.Token() || got.Term <= a.Token() || got.Value != "b1" {
		t.Fatalf("observed %+v, want b's term %d (above %d) with b1", got, b.Token(), a.Token())
	}
	stop()
	for range obs { // drained: the channel is closed once ctx ended
	}
}

// Proclaim changes the value of the current term only: once the term
// ended (resigned, or lost to another), it is ErrNotLeader and the new
// leader's value stays.
func testProclaim(t *testing.T, h Harness) {
	a := campaign(t, election(t, h, "a", time.Minute), "a")
	resign(t, a)
	if err := a.Proclaim(ctx, "a again"); !errors.Is(err, leader.ErrNotLeader) {
		t.Fatalf("Proclaim after Resign: %v, want ErrNotLeader", err)
	}
	if l := current(t, election(t, h, "x", time.Minute)); l != (leader.Leader{}) {
		t.Fatalf("a resigned Proclaim wrote: leader %+v", l)
	}

	a = campaign(t, election(t, h, "a", time.Minute), "a")
	forced, _, err := h.Store.Holder(ctx, a.Lease().Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Release(ctx, forced); err != nil {
		t.Fatal(err)
	}
	b := campaign(t, election(t, h, "b", time.Minute), "b")
	// a may or may not have noticed yet: either way its value reaches no
	// one.
	if err := a.Proclaim(ctx, "a's, stale"); !errors.Is(err, leader.ErrNotLeader) {
		t.Fatalf("Proclaim by a superseded term: %v, want ErrNotLeader", err)
	}
	if l := current(t, election(t, h, "x", time.Minute)); l.Holder != "b" || l.Value != "b" || l.Term != b.Token() {
		t.Fatalf("leader %+v, want b's term %d with its value", l, b.Token())
	}
}

// refusals is a store that closes refused at the first acquire it saw
// refused because the lock is held.
type refusals struct {
	leader.Store
	refused chan struct{}
	once    sync.Once
}

func (r *refusals) AcquireValue(ctx context.Context, name, holder string, ttl time.Duration, value string) (fencedlock.Lease, error) {
	l, err := r.Store.AcquireValue(ctx, name, holder, ttl, value)
	if errors.Is(err, fencedlock.ErrHeld) {
		r.once.Do(func() { close(r.refused) })
	}
	return l, err
}

// A campaign whose ctx ends while another leads returns ctx's cause and the
// other's *HeldError, and takes nothing.
func testCanceled(t *testing.T, h Harness) {
	a := campaign(t, election(t, h, "a", time.Minute), "a")
	store := &refusals{Store: h.Store, refused: make(chan struct{})}
	b, err := leader.NewElection(store, electionName(t), &leader.Config{Holder: "b",
		Wait: &fencedlock.WaitConfig{MinDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-store.refused // b waits: a leads
		cancel()
	}()
	term, err := b.Campaign(cctx, "b")
	var held *fencedlock.HeldError
	if term != nil || !errors.Is(err, context.Canceled) || !errors.As(err, &held) || held.Holder != "a" {
		t.Fatalf("canceled Campaign: %v, %v; want the cancellation and a's *HeldError", term, err)
	}
	if l := current(t, election(t, h, "x", time.Minute)); l.Holder != "a" || l.Term != a.Token() {
		t.Fatalf("leader %+v after a canceled campaign, want a", l)
	}
}

// Bad input is refused with ErrInvalid before anything is written.
func testBadInput(t *testing.T, h Harness) {
	big := strings.Repeat("v", fencedlock.MaxValueLen+1)
	e := election(t, h, "a", time.Minute)
	if _, err := e.Campaign(ctx, big); !errors.Is(err, leader.ErrInvalid) || !errors.Is(err, fencedlock.ErrValueTooLarge) {
		t.Fatalf("Campaign with a value too large: %v, want ErrInvalid and ErrValueTooLarge", err)
	}
	if l := current(t, e); l != (leader.Leader{}) {
		t.Fatalf("a refused Campaign elected %+v", l)
	}
	a := campaign(t, e, "a")
	if err := a.Proclaim(ctx, big); !errors.Is(err, leader.ErrInvalid) {
		t.Fatalf("Proclaim of a value too large: %v, want ErrInvalid", err)
	}
	if l := current(t, e); l.Value != "a" {
		t.Fatalf("a refused Proclaim changed the value to %d bytes", len(l.Value))
	}
	for _, c := range []struct {
		store leader.Store
		name  string
		cfg   *leader.Config
	}{
		{nil, "x", nil},
		{h.Store, "", nil},
		{h.Store, "x\x00", nil},
		{h.Store, strings.Repeat("x", fencedlock.MaxNameLen), nil}, // too long with the prefix
		{h.Store, "x", &leader.Config{Holder: "\xff"}},
		{h.Store, "x", &leader.Config{TTL: time.Microsecond}},
		{h.Store, "x", &leader.Config{TTL: time.Second, Keepalive: &fencedlock.KeepaliveConfig{Interval: time.Second}}},
		{h.Store, "x", &leader.Config{Wait: &fencedlock.WaitConfig{Jitter: 2}}},
		{h.Store, "x", &leader.Config{ObserveInterval: time.Microsecond}},
	} {
		if _, err := leader.NewElection(c.store, c.name, c.cfg); !errors.Is(err, leader.ErrInvalid) {
			t.Errorf("NewElection(%v, %q, %+v) = %v, want ErrInvalid", c.store != nil, c.name, c.cfg, err)
		}
	}
}
