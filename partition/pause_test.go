package partition_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/partition"
)

// stall is a membership store whose heartbeats can be held: while held, a
// heartbeat waits until release or until its context ends, as one stuck
// behind a loaded database does.
type stall struct {
	partition.Membership
	mu      sync.Mutex
	gate    chan struct{} // nil: heartbeats pass
	waiting int           // heartbeats held now
	gaveUp  int           // held heartbeats whose context ended
}

func (s *stall) hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gate = make(chan struct{})
}

func (s *stall) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.gate)
	s.gate = nil
}

func (s *stall) Heartbeat(ctx context.Context, name string, inc int64, ttl time.Duration) error {
	s.mu.Lock()
	gate := s.gate
	s.mu.Unlock()
	if gate != nil {
		s.count(1, 0)
		select {
		case <-gate:
			s.count(-1, 0)
		case <-ctx.Done():
			s.count(-1, 1)
			return context.Cause(ctx)
		}
	}
	return s.Membership.Heartbeat(ctx, name, inc, ttl)
}

func (s *stall) count(waiting, gaveUp int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting += waiting
	s.gaveUp += gaveUp
}

// waitLate waits until the member has given up a held heartbeat (its lease
// is no longer safely held) and has sent another, which is held.
func (s *stall) waitLate(t *testing.T) {
	t.Helper()
	waitFor(t, 30*time.Second, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.gaveUp > 0 && s.waiting > 0
	})
}

// events records a member's partition events.
type events struct {
	mu  sync.Mutex
	all []partition.Event
}

func (ev *events) on(e partition.Event) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	ev.all = append(ev.all, e)
}

// count returns how many events of kind were recorded, and their reasons.
func (ev *events) count(kind partition.EventKind) (n int, reasons []string) {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range ev.all {
		if e.Kind == kind {
			n++
			reasons = append(reasons, e.Reason)
		}
	}
	return n, reasons
}

// lateConfig trusts a lease for 1s after a heartbeat is sent (TTL −
// Margin), and lets it lapse only 9s later: the tests below act in between
// with a generous margin. The store runs on a manual clock that never moves
// unless a test moves it, so its leases expire only when the test says.
func lateConfig(ev *events) partition.Config {
	return partition.Config{Name: "solo", TTL: 10 * time.Second, Margin: 9 * time.Second,
		Interval: 100 * time.Millisecond, MoveInterval: 10 * time.Millisecond, OnEvent: ev.on}
}

// late holds st's heartbeats until m has given one up and sent another,
// checks that m refuses calls for key meanwhile, and releases them.
func late(t *testing.T, st *stall, m *partition.Member, key string) {
	t.Helper()
	st.hold()
	st.waitLate(t)
	if err := runsWhileLate(m, key); err != nil {
		t.Fatal(err)
	}
}

// runsWhileLate returns an error if m, whose heartbeats are late, runs a
// call for key or answers it with anything but ErrMoving.
func runsWhileLate(m *partition.Member, key string) error {
	ran := false
	err := m.Do(ctx, key, func(context.Context, partition.Epoch) error { ran = true; return nil })
	if ran || !errors.Is(err, partition.ErrMoving) {
		return fmt.Errorf("a call while heartbeats are late: ran %v, %v; want ErrMoving", ran, err)
	}
	return nil
}

// A heartbeat that answers late — after the member stopped trusting its
// lease, before the lease could expire — only pauses the executors: calls
// get ErrMoving meanwhile, and once a heartbeat of the same incarnation
// succeeds (which proves the store kept the lease, so no one else could
// claim a partition) they resume with the same epochs: no claim, no
// handover, no new incarnation.
func TestLateHeartbeatKeepsEpochs(t *testing.T) {
	t.Parallel()
	st := &stall{Membership: newMemory(&clock.Manual{})}
	ev := &events{}
	m, _ := startMember(t, st, lateConfig(ev))
	var before partition.Epoch
	if err := doOwned(m, "k", func(_ context.Context, e partition.Epoch) error { before = e; return nil }); err != nil {
		t.Fatal(err)
	}
	owned, live := m.Owned(), liveIncarnation(t, st, "solo")

	late(t, st, m, "k")
	st.release()
	var after partition.Epoch
	if err := doOwned(m, "k", func(_ context.Context, e partition.Epoch) error { after = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("epoch %+v after a late heartbeat, was %+v: the partition was claimed anew", after, before)
	}
	if now := m.Owned(); !slices.Equal(now, owned) {
		t.Fatalf("after a late heartbeat the member owns %d partitions, %d with the epochs it had", len(now), countSame(now, owned))
	}
	if n, reasons := ev.count(partition.Stopped); n != 0 {
		t.Fatalf("%d partitions stopped on a late heartbeat (%v)", n, reasons[0])
	}
	if n, _ := ev.count(partition.Started); n != len(owned) {
		t.Fatalf("%d partitions started, %d owned", n, len(owned))
	}
	if inc := liveIncarnation(t, st, "solo"); inc != live {
		t.Fatalf("incarnation %d after a late heartbeat, was %d", inc, live)
	}
}

// A late heartbeat that the store then refuses (the lease expired in the
// store's eyes) stops the paused executors, and the member joins again and
// claims its partitions with new epochs.
func TestLateHeartbeatRefusedStopsTheMember(t *testing.T) {
	t.Parallel()
	c := &clock.Manual{}
	st := &stall{Membership: newMemory(c)}
	ev := &events{}
	tel := telemetrytest.New(t)
	cfg := lateConfig(ev)
	cfg.MeterProvider = tel.Meters
	m, _ := startMember(t, st, cfg)
	var before partition.Epoch
	if err := doOwned(m, "k", func(_ context.Context, e partition.Epoch) error { before = e; return nil }); err != nil {
		t.Fatal(err)
	}
	live := liveIncarnation(t, st, "solo")

	late(t, st, m, "k")
	c.Advance(time.Hour) // the store's lease expires
	st.release()
	var after partition.Epoch
	if err := doOwned(m, "k", func(_ context.Context, e partition.Epoch) error { after = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if after.Token <= before.Token {
		t.Fatalf("epoch %d after a refused heartbeat, was %d: the partition was not claimed anew", after.Token, before.Token)
	}
	if n, reasons := ev.count(partition.Stopped); n == 0 || reasons[0] != partition.ReasonLeaseLost {
		t.Fatalf("%d partitions stopped (%v), want them stopped for a lost lease", n, reasons)
	}
	if n := tel.Sum(t, "lockfree.partition.stops", attribute.String(telemetry.Cause, "lease_lost")); n == 0 {
		t.Errorf("no stop counted for a lost lease\n%s", tel.Describe(t))
	}
	if inc := liveIncarnation(t, st, "solo"); inc <= live {
		t.Fatalf("incarnation %d after a refused heartbeat, was %d", inc, live)
	}
}

func liveIncarnation(t *testing.T, s partition.Membership, name string) int64 {
	t.Helper()
	live, err := s.Live(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range live {
		if o.Name == name {
			return o.Incarnation
		}
	}
	t.Fatalf("%s is not live: %v", name, live)
	return 0
}

func countSame(a, b []partition.Epoch) int {
	n := 0
	for _, e := range a {
		if slices.Contains(b, e) {
			n++
		}
	}
	return n
}

// failingClaims is a membership store whose claims fail while broken, as
// claims that time out on a loaded database do.
type failingClaims struct {
	partition.Membership
	broken atomic.Bool
}

var errClaimTimeout = errors.New("claim timed out")

func (s *failingClaims) Claim(ctx context.Context, member string, inc int64, ps []int) ([]partition.Epoch, error) {
	if s.broken.Load() {
		return nil, errClaimTimeout
	}
	return s.Membership.Claim(ctx, member, inc, ps)
}

// A first claim that fails does not fail Start: the member has joined, and
// its loop claims the partitions once the store answers; meanwhile Do
// answers ErrMoving for them.
func TestStartLeavesAFailedClaimToTheLoop(t *testing.T) {
	t.Parallel()
	st := &failingClaims{Membership: newMemory(nil)}
	st.broken.Store(true)
	cfg := testConfig
	cfg.Name = "solo"
	m, err := partition.NewMember(st, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatalf("Start with a failing claim = %v, want nil: the loop claims later", err)
	}
	defer m.Stop(ctx)
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrMoving) {
		t.Fatalf("Do before the claim = %v, want ErrMoving", err)
	}
	if len(m.Owned()) != 0 {
		t.Fatalf("owns %v with failing claims", m.Owned())
	}
	st.broken.Store(false)
	if err := doOwned(m, "k", func(context.Context, partition.Epoch) error { return nil }); err != nil {
		t.Fatalf("Do once claims work: %v", err)
	}
}

// lapsing is a membership store whose lease of a member can be made to
// expire: the next heartbeat finds it gone, as after a pause past the TTL.
type lapsing struct {
	partition.Membership
	lapse atomic.Bool
}

func (s *lapsing) Heartbeat(ctx context.Context, name string, inc int64, ttl time.Duration) error {
	if s.lapse.CompareAndSwap(true, false) {
		if err := s.Membership.Leave(ctx, name, inc); err != nil {
			return err
		}
	}
	return s.Membership.Heartbeat(ctx, name, inc, ttl)
}

// A partition being handed off drains under the lease that claimed it: if
// that lease is lost meanwhile and the member joins again, the calls still
// queued on the old executor do not run — the new incarnation's lease says
// nothing about the old epoch.
func TestDrainStopsWithItsLease(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	cfg := testConfig
	cfg.DrainTimeout = time.Minute // the drain outlasts the test's steps
	cfg.Name = "a"
	la := &lapsing{Membership: store}
	a, _ := startMember(t, la, cfg)
	two, err := partition.NewRing([]string{"a", "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	key := keyOf(two, "b")
	// A call that runs until released, and one queued behind it.
	running, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	first, queued := make(chan error, 1), make(chan error, 1)
	go func() {
		first <- doOwned(a, key, func(context.Context, partition.Epoch) error { close(running); <-release; return nil })
	}()
	<-running
	ran := make(chan partition.Epoch, 1)
	go func() {
		queued <- a.Do(ctx, key, func(_ context.Context, e partition.Epoch) error { ran <- e; return nil })
	}()
	waitFor(t, 30*time.Second, func() bool { return partition.Queued(a, key) == 1 })
	live := liveIncarnation(t, store, "a")

	cfg.Name = "b"
	startMember(t, store, cfg)                                      // the ring moves key's partition to b: a drains it
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) }) // before the members stop
	waitFor(t, 30*time.Second, func() bool {
		return !slices.ContainsFunc(a.Owned(), func(e partition.Epoch) bool { return e.Partition == a.Partition(key) })
	})
	la.lapse.Store(true) // a's lease expires: a joins again
	waitFor(t, 30*time.Second, func() bool {
		ms, err := store.Live(ctx)
		return err == nil && slices.ContainsFunc(ms, func(m partition.MemberInfo) bool { return m.Name == "a" && m.Incarnation > live })
	})
	// a joined after it stopped its executors: a call served now runs under
	// the new lease.
	if err := doOwned(a, keyOf(two, "a"), func(context.Context, partition.Epoch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	releaseOnce.Do(func() { close(release) })
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-queued; !errors.Is(err, partition.ErrMoving) {
		select {
		case e := <-ran:
			t.Fatalf("a call queued under a lost lease ran with epoch %+v after the member joined again (%v)", e, err)
		default:
			t.Fatalf("the call queued under a lost lease = %v, want ErrMoving", err)
		}
	}
}

// keyOf returns a key that ring places on member.
func keyOf(ring *partition.Ring, member string) string {
	for i := 0; ; i++ {
		if k := fmt.Sprintf("key-%d", i); ring.Owner(ring.Partition(k)) == member {
			return k
		}
	}
}

// expiredOnLeave is a membership store whose lease has run out by the time
// the member marks itself leaving, as after a pause just before Stop.
type expiredOnLeave struct{ partition.Membership }

func (s expiredOnLeave) SetLeaving(ctx context.Context, name string, inc int64) error {
	if err := s.Membership.Leave(ctx, name, inc); err != nil {
		return err
	}
	return s.Membership.SetLeaving(ctx, name, inc)
}

// Stop of a member whose lease ran out just before has nothing to hand off:
// it stops, and reports no error — the member is stopped as asked.
func TestStopAfterTheLeaseExpired(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	cfg := testConfig
	cfg.Name = "solo"
	m, _ := startMember(t, expiredOnLeave{store}, cfg)
	if err := doOwned(m, "k", func(context.Context, partition.Epoch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("Stop after the lease expired = %v, want nil", err)
	}
	<-m.Stopped()
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrStopped) {
		t.Fatalf("Do after Stop = %v, want ErrStopped", err)
	}
	if live, _ := store.Live(ctx); len(live) != 0 {
		t.Fatalf("Stop left a lease: %v", live)
	}
}
