package partition_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
	"github.com/lockfree-go/lockfree/internal/telemetry/telemetrytest"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/partition"
)

var ctx = context.Background()

// backends are the stores the member tests run on.
var backends = []struct {
	name string
	new  func(t *testing.T) partition.Membership
}{
	{"memory", func(t *testing.T) partition.Membership { return newMemory(nil) }},
	{"postgres", func(t *testing.T) partition.Membership {
		db := testdb.New(t, partition.Migrations()...)
		s := newPostgres(t, db)
		pools.Store(s, db.Pool)
		return s
	}},
}

// watcher checks, from the members' events and from inside the functions
// they run, that no partition ever has two accepting owners or two running
// functions, and records when partitions stop and start.
type watcher struct {
	t  testing.TB
	mu sync.Mutex
	// accepting is the member accepting work for each partition.
	accepting  map[int]string
	violations []string
	stopped    map[int]stop    // last Stopped per partition
	windows    []time.Duration // Stopped(old) → Started(new) per move
	starts     int
	running    [partition.MaxPartitions]atomic.Int32
}

func newWatcher(t testing.TB) *watcher {
	return &watcher{t: t, accepting: map[int]string{}, stopped: map[int]stop{}}
}

func (w *watcher) onEvent(e partition.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, who := e.Epoch.Partition, e.Epoch.Owner
	switch e.Kind {
	case partition.Started:
		if cur, ok := w.accepting[p]; ok && cur != who {
			w.violations = append(w.violations, fmt.Sprintf("partition %d started on %s while %s accepts", p, who, cur))
		}
		w.accepting[p] = who
		w.starts++
		// A member that starts a partition it stopped itself (its lease
		// was late on a loaded machine, and it claimed anew) did not
		// move it: only a start elsewhere ends a handover window.
		if st, ok := w.stopped[p]; ok && st.owner != who {
			w.windows = append(w.windows, time.Since(st.at))
		}
		delete(w.stopped, p)
	case partition.Stopped:
		if w.accepting[p] == who {
			delete(w.accepting, p)
		}
		w.stopped[p] = stop{owner: who, at: time.Now()}
	}
}

// stop is when a partition stopped on a member.
type stop struct {
	owner string
	at    time.Time
}

// forget is for a member that crashed: it accepts nothing any more.
func (w *watcher) forget(member string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for p, m := range w.accepting {
		if m == member {
			delete(w.accepting, p)
			w.stopped[p] = stop{owner: member, at: time.Now()}
		}
	}
}

// run wraps fn to detect two functions of one partition running at once.
func (w *watcher) run(e partition.Epoch, fn func() error) error {
	if n := w.running[e.Partition].Add(1); n > 1 {
		w.mu.Lock()
		w.violations = append(w.violations, fmt.Sprintf("partition %d: %d functions at once", e.Partition, n))
		w.mu.Unlock()
	}
	defer w.running[e.Partition].Add(-1)
	return fn()
}

func (w *watcher) check() {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.violations) > 0 {
		w.t.Fatalf("%d violations, first: %s", len(w.violations), w.violations[0])
	}
}

// takeWindows returns and clears the recorded handover windows.
func (w *watcher) takeWindows() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.windows
	w.windows = nil
	return out
}

// fleet is a set of members in this process over one store.
type fleet struct {
	t       testing.TB
	store   partition.Membership
	w       *watcher
	cfg     partition.Config
	mu      sync.Mutex
	members map[string]*partition.Member
	pausers map[string]*pauser
}

func newFleet(t testing.TB, store partition.Membership, cfg partition.Config) *fleet {
	return &fleet{t: t, store: store, w: newWatcher(t), cfg: cfg,
		members: map[string]*partition.Member{}, pausers: map[string]*pauser{}}
}

func (f *fleet) start(name string) *partition.Member {
	f.t.Helper()
	cfg := f.cfg
	cfg.Name, cfg.Addr, cfg.OnEvent = name, name+".test:80", f.w.onEvent
	m, p := startMember(f.t, f.store, cfg)
	f.mu.Lock()
	f.members[name], f.pausers[name] = m, p
	f.mu.Unlock()
	return m
}

// pause stops the heartbeats and steps of member name, as a process pause
// would, until resume is called; its executors keep running.
func (f *fleet) pause(name string) (resume func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pausers[name].pause()
}

func (f *fleet) remove(name string) *partition.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := f.members[name]
	delete(f.members, name)
	return m
}

func (f *fleet) all() []*partition.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ms []*partition.Member
	for _, m := range f.members {
		ms = append(ms, m)
	}
	return ms
}

func (f *fleet) member(name string) *partition.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[name]
}

// settled waits until every member computes the same ring over exactly the
// running members and owns exactly what that ring places on it.
func (f *fleet) settled(timeout time.Duration) *partition.Ring {
	f.t.Helper()
	var ring *partition.Ring
	waitFor(f.t, timeout, func() bool {
		ms := f.all()
		var names []string
		for _, m := range ms {
			names = append(names, m.Name())
		}
		slices.Sort(names)
		for _, m := range ms {
			r := m.Ring()
			if !slices.Equal(r.Members(), names) {
				return false
			}
			var want []int
			for p := range r.Partitions() {
				if r.Owner(p) == m.Name() {
					want = append(want, p)
				}
			}
			var got []int
			for _, e := range m.Owned() {
				got = append(got, e.Partition)
			}
			if !slices.Equal(got, want) {
				return false
			}
			ring = r
		}
		return ring != nil
	})
	return ring
}

// do routes key like a client would: ask any member, follow NotOwnerError,
// retry ErrMoving, until fn ran or ctx ends.
func (f *fleet) do(ctx context.Context, key string, fn func(context.Context, partition.Epoch) error) error {
	var via *partition.Member
	for {
		if via == nil {
			ms := f.all()
			if len(ms) == 0 {
				return errors.New("no members")
			}
			via = ms[0]
		}
		err := via.Do(ctx, key, fn)
		var notOwner *partition.NotOwnerError
		switch {
		case errors.As(err, &notOwner):
			via = f.member(notOwner.Owner)
		case errors.Is(err, partition.ErrMoving), errors.Is(err, partition.ErrStopped):
			via = nil
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(time.Millisecond):
			}
		default:
			return err
		}
	}
}

var testConfig = partition.Config{TTL: time.Second, Interval: 100 * time.Millisecond, MoveInterval: 10 * time.Millisecond}

// joinLeaveStores are TestJoinAndLeave's stores and configurations: only
// the join and the leave may move partitions there. A member that a loaded
// machine keeps from heartbeating for TTL would lose its lease, and its
// partitions would move as well: more handovers than the rings' moves. The
// memory store runs on a clock that never advances, so no lease expires in
// its eyes whatever the scheduling delay (a member whose own clock says its
// lease lapsed claims its partitions again, which moves nothing).
// PostgreSQL's clock runs: its members get the default 10 s lease.
var joinLeaveStores = []struct {
	name string
	new  func(t *testing.T) partition.Membership
	cfg  partition.Config
}{
	{"memory", func(t *testing.T) partition.Membership { return newMemory(&clock.Manual{}) }, testConfig},
	{"postgres", backends[1].new, partition.Config{TTL: 10 * time.Second, Interval: testConfig.Interval,
		MoveInterval: testConfig.MoveInterval}},
}

// Three members route every key to exactly one owner; a fourth joins and
// one leaves while clients keep calling: no partition ever has two
// accepting owners or two running functions, and every call is served.
func TestJoinAndLeave(t *testing.T) {
	t.Parallel()
	for _, b := range joinLeaveStores {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, b.new(t), b.cfg)
			for _, n := range []string{"member-0", "member-1", "member-2"} {
				f.start(n)
			}
			three := f.settled(30 * time.Second)
			checkRouting(t, f, three)
			f.w.takeWindows()

			// Clients: each key's calls must be served in order, once each.
			cctx, stop := context.WithCancel(ctx)
			var served atomic.Int64
			var clients sync.WaitGroup
			var gapMu sync.Mutex
			var maxGap time.Duration
			counts := make([]int, 64)
			for c := range 64 {
				clients.Add(1)
				go func() {
					defer clients.Done()
					key := fmt.Sprintf("account-%d", c)
					last := time.Now()
					for cctx.Err() == nil {
						err := f.do(cctx, key, func(_ context.Context, e partition.Epoch) error {
							return f.w.run(e, func() error { counts[c]++; return nil })
						})
						if err != nil {
							if cctx.Err() == nil {
								t.Errorf("client %d: %v", c, err)
							}
							return
						}
						served.Add(1)
						now := time.Now()
						gapMu.Lock()
						maxGap = max(maxGap, now.Sub(last))
						gapMu.Unlock()
						last = now
					}
				}()
			}

			f.start("member-3")
			four := f.settled(30 * time.Second)
			joinMoved, joinWindows := len(partition.Moved(three, four)), f.w.takeWindows()

			leaving := f.remove("member-1")
			if err := leaving.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			after := f.settled(30 * time.Second)
			leaveMoved, leaveWindows := len(partition.Moved(four, after)), f.w.takeWindows()
			stop()
			clients.Wait()
			f.w.check()

			if joinMoved == 0 || leaveMoved == 0 || len(joinWindows) != joinMoved || len(leaveWindows) != leaveMoved {
				t.Fatalf("moved %d/%d partitions with %d/%d handovers", joinMoved, leaveMoved, len(joinWindows), len(leaveWindows))
			}
			checkRouting(t, f, after)
			t.Logf("%s: join 3→4 moved %d of %d partitions, handover window %s; leave 4→3 moved %d, window %s; "+
				"longest client wait %v over %d calls",
				b.name, joinMoved, four.Partitions(), summary(joinWindows), leaveMoved, summary(leaveWindows), maxGap, served.Load())
		})
	}
}

// checkRouting: for every key exactly one member runs the call; the others
// name that member.
func checkRouting(t *testing.T, f *fleet, ring *partition.Ring) {
	t.Helper()
	for i := range 200 {
		key := fmt.Sprintf("key-%d", i)
		owner := ring.Owner(ring.Partition(key))
		ran := 0
		for _, m := range f.all() {
			fn := func(_ context.Context, e partition.Epoch) error {
				if e.Owner != m.Name() || e.Partition != ring.Partition(key) || e.Token <= 0 {
					return fmt.Errorf("epoch %+v", e)
				}
				ran++
				return nil
			}
			err := m.Do(ctx, key, fn)
			if m.Name() == owner && errors.Is(err, partition.ErrMoving) {
				// A heartbeat late on a loaded machine makes the owner
				// refuse until its lease is safe again; it must then serve.
				err = doOwned(m, key, fn)
			}
			var notOwner *partition.NotOwnerError
			switch {
			case m.Name() == owner && err != nil:
				t.Fatalf("%s, the owner of %q, failed: %v", owner, key, err)
			case m.Name() != owner && (!errors.As(err, &notOwner) || notOwner.Owner != owner || notOwner.Addr != owner+".test:80"):
				t.Fatalf("%s for %q: %v, want NotOwnerError naming %s", m.Name(), key, err, owner)
			}
		}
		if ran != 1 {
			t.Fatalf("%q ran on %d members", key, ran)
		}
	}
}

func summary(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	slices.Sort(ds)
	return fmt.Sprintf("p50 %v max %v", ds[len(ds)/2].Round(time.Microsecond), ds[len(ds)-1].Round(time.Microsecond))
}

// A member that crashes (no handoff, no release) loses its partitions when
// its lease expires; the new owner's epochs are one above the crashed
// member's.
func TestCrashedMemberPartitionsMove(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, b.new(t), testConfig)
			f.start("a")
			crashed := f.start("b")
			f.settled(30 * time.Second)
			owned := crashed.Owned()
			partition.Crash(f.remove("b"))
			f.w.forget("b")
			f.settled(30 * time.Second)
			after := f.member("a").Owned()
			if len(after) != f.member("a").Ring().Partitions() {
				t.Fatalf("a owns %d partitions", len(after))
			}
			for _, e := range owned {
				if after[e.Partition].Token != e.Token+1 {
					t.Fatalf("partition %d: epoch %d after %d", e.Partition, after[e.Partition].Token, e.Token)
				}
			}
			f.w.check()
		})
	}
}

func TestNewMemberRejectsBadConfig(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	tests := []struct {
		name string
		cfg  partition.Config
	}{
		{"name with NUL", partition.Config{Name: "a\x00"}},
		{"long name", partition.Config{Name: fmt.Sprintf("%0300d", 1)}},
		{"long address", partition.Config{Name: "a", Addr: fmt.Sprintf("%0300d", 1)}},
		{"ttl too short", partition.Config{Name: "a", TTL: time.Microsecond}},
		{"interval not below ttl", partition.Config{Name: "a", TTL: time.Second, Interval: time.Second}},
		{"interval into the margin", partition.Config{Name: "a", TTL: time.Second, Margin: 500 * time.Millisecond, Interval: 600 * time.Millisecond}},
		{"move interval above interval", partition.Config{Name: "a", Interval: time.Second, MoveInterval: 2 * time.Second}},
		{"negative drain", partition.Config{Name: "a", DrainTimeout: -1}},
		{"negative queue", partition.Config{Name: "a", QueueSize: -1}},
		{"load below 1", partition.Config{Name: "a", Ring: &partition.RingConfig{Load: 0.9}}},
		{"negative body limit", partition.Config{Name: "a", Forward: &partition.ForwardConfig{MaxRequestBody: -1}}},
		{"negative body timeout", partition.Config{Name: "a", Forward: &partition.ForwardConfig{RequestBodyTimeout: -1}}},
		{"short forward secret", partition.Config{Name: "a", Forward: &partition.ForwardConfig{Secret: make([]byte, partition.MinSecretLen-1)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := partition.NewMember(store, &tt.cfg)
			if !errors.Is(err, partition.ErrInvalid) || strings.Count(err.Error(), "partition:") != 1 {
				t.Fatalf("NewMember = %v, want ErrInvalid with the package prefix once", err)
			}
		})
	}
	if _, err := partition.NewMember(nil, nil); !errors.Is(err, partition.ErrInvalid) {
		t.Errorf("NewMember without a store = %v, want ErrInvalid", err)
	}
	if live, _ := store.Live(ctx); len(live) != 0 {
		t.Fatalf("bad configs joined: %v", live)
	}
}

// A nil config is valid: the member gets a UUIDv7 name, and NewMember does
// no I/O — it joins at Start.
func TestNewMemberDefaults(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	m, err := partition.NewMember(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := uuid.Parse(m.Name())
	if err != nil || id.Version() != 7 {
		t.Fatalf("default name %q: version %v, %v; want a UUIDv7", m.Name(), id.Version(), err)
	}
	if live, _ := store.Live(ctx); len(live) != 0 {
		t.Fatalf("NewMember joined: %v", live)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(ctx)
	if live, _ := store.Live(ctx); len(live) != 1 || live[0].Name != m.Name() {
		t.Fatalf("after Start, live = %v", live)
	}
}

// A fleet must agree on the ring: a member with another partition count is
// refused, and leaves no lease behind.
func TestRingMismatchIsRefused(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	f := newFleet(t, store, testConfig)
	f.start("a")
	cfg := testConfig
	cfg.Name, cfg.Ring = "b", &partition.RingConfig{Partitions: 64}
	m, err := partition.NewMember(store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); !errors.Is(err, partition.ErrRingMismatch) {
		t.Fatalf("Start with another ring = %v, want ErrRingMismatch", err)
	}
	if live, _ := store.Live(ctx); len(live) != 1 {
		t.Fatalf("live = %v", live)
	}
}

// A second process under a live member's name waits for that lease; a
// Start that gave up can be called again, and joins once the name is free.
func TestDuplicateNameWaits(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	f := newFleet(t, store, testConfig)
	a := f.start("a")
	cfg := testConfig
	cfg.Name = "a"
	second, err := partition.NewMember(store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := second.Start(wctx); !errors.Is(err, partition.ErrNameInUse) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start under a live name = %v", err)
	}
	if err := second.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrStopped) {
		t.Fatalf("Do after a failed Start = %v, want ErrStopped", err)
	}
	if err := f.remove("a").Stop(ctx); err != nil {
		t.Fatal(err)
	}
	<-a.Stopped()
	if err := second.Start(ctx); err != nil {
		t.Fatalf("Start again once the name is free: %v", err)
	}
	defer second.Stop(ctx)
	if err := doOwned(second, "k", func(context.Context, partition.Epoch) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// Start and Stop: Do before Start is refused; Start twice is Start once;
// Stop waits for the handoff and ends the lease, Stopped closes, a second
// Stop returns at once, and a stopped member cannot start again.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	cfg := testConfig
	cfg.Name = "solo"
	m, err := partition.NewMember(store, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrStopped) {
		t.Fatalf("Do before Start: %v", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatalf("second Start: %v", err)
	}
	select {
	case <-m.Stopped():
		t.Fatal("Stopped closed while running")
	default:
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-m.Stopped():
	default:
		t.Fatal("Stopped not closed when Stop returned")
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := m.Start(ctx); !errors.Is(err, partition.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
	never, _ := partition.NewMember(store, &cfg)
	if err := never.Stop(ctx); err != nil {
		t.Fatalf("Stop of a member never started: %v", err)
	}
	<-never.Stopped()
}

func TestDoErrors(t *testing.T) {
	t.Parallel()
	store := newMemory(nil)
	cfg := testConfig
	cfg.Name = "solo"
	m, _ := startMember(t, store, cfg)
	if err := m.Do(ctx, "k", nil); !errors.Is(err, partition.ErrInvalid) {
		t.Fatalf("nil fn: %v", err)
	}
	boom := errors.New("boom")
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return boom }); err != boom {
		t.Fatalf("fn's error: %v", err)
	}
	// A call whose context ends while it waits in the queue never runs.
	block, started := make(chan struct{}), make(chan struct{})
	go m.Do(ctx, "k", func(context.Context, partition.Epoch) error { close(started); <-block; return nil })
	<-started
	qctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	ran := false
	err := m.Do(qctx, "k", func(context.Context, partition.Epoch) error { ran = true; return nil })
	cancel()
	close(block)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("queued call past its deadline: %v", err)
	}
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Fatal("a call whose context ended in the queue ran")
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrStopped) {
		t.Fatalf("Do after Stop: %v", err)
	}
	if live, _ := store.Live(ctx); len(live) != 0 {
		t.Fatalf("Stop left a lease: %v", live)
	}
	owners, _ := store.Owners(ctx, 271)
	for _, o := range owners {
		if o.Owner != "" {
			t.Fatalf("Stop left partition %d owned", o.Partition)
		}
	}
}

// Calls to one partition run one at a time, in arrival order.
func TestDoIsSerialPerPartition(t *testing.T) {
	t.Parallel()
	cfg := testConfig
	cfg.Name = "solo"
	m, _ := startMember(t, newMemory(nil), cfg)
	w := newWatcher(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[string][]int{}
	for c := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", c%3)
			for i := range 200 {
				err := m.Do(ctx, key, func(_ context.Context, e partition.Epoch) error {
					return w.run(e, func() error {
						mu.Lock()
						seen[fmt.Sprint(key, c)] = append(seen[fmt.Sprint(key, c)], i)
						mu.Unlock()
						return nil
					})
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	w.check()
	for k, is := range seen {
		if !sort.IntsAreSorted(is) || len(is) != 200 {
			t.Fatalf("%s: calls ran out of order or lost: %d", k, len(is))
		}
	}
}

// The memory store's clock decides expiry: advancing it makes a member
// lose its lease while its process keeps running.
func TestManualClockExpiry(t *testing.T) {
	t.Parallel()
	c := &clock.Manual{}
	store := newMemory(c)
	f := newFleet(t, store, testConfig)
	a := f.start("a")
	before := a.Owned()
	c.Advance(time.Hour) // a's heartbeats are now late on the store's clock
	waitFor(t, 30*time.Second, func() bool {
		after := a.Owned()
		return len(after) == len(before) && after[0].Token > before[0].Token
	})
}

func waitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A function that panics on the executor's goroutine — where no net/http
// recovery reaches — fails its call with a *PanicError; the process lives
// and the executor serves the next call.
func TestDoRecoversPanic(t *testing.T) {
	t.Parallel()
	cfg := testConfig
	cfg.Name = "solo"
	m, _ := startMember(t, newMemory(nil), cfg)
	err := doOwned(m, "k", func(context.Context, partition.Epoch) error { panic("boom") })
	var pe *partition.PanicError
	if !errors.Is(err, partition.ErrPanic) || !errors.As(err, &pe) {
		t.Fatalf("Do of a panicking function = %v, want a *PanicError", err)
	}
	if pe.Value != "boom" || !strings.Contains(string(pe.Stack), "TestDoRecoversPanic") {
		t.Fatalf("PanicError = %v with stack\n%s", pe.Value, pe.Stack)
	}
	ran := false
	if err := doOwned(m, "k", func(context.Context, partition.Epoch) error { ran = true; return nil }); err != nil || !ran {
		t.Fatalf("the next call on the partition: %v (ran %v)", err, ran)
	}
}

// doOwned calls m.Do until the partition is not moving: on a loaded machine
// a member may be between leases for a moment.
func doOwned(m *partition.Member, key string, fn func(context.Context, partition.Epoch) error) error {
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := m.Do(ctx, key, fn)
		if !errors.Is(err, partition.ErrMoving) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop returns when its context ends even if a function ignores its own
// context; the straggler finishes in the background, and Stopped closes when
// it returns.
func TestStopHonoursDeadline(t *testing.T) {
	t.Parallel()
	cfg := testConfig
	cfg.Name = "solo"
	store := newMemory(nil)
	m, _ := startMember(t, store, cfg)
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- doOwned(m, "k", func(context.Context, partition.Epoch) error {
			close(started)
			<-release // ignores its context
			return nil
		})
	}()
	<-started
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- m.Stop(cctx) }()
	select {
	case err := <-stopped:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Stop past its deadline = %v, want DeadlineExceeded", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Stop ignored its deadline while a function ignored its context")
	}
	if live, _ := store.Live(ctx); len(live) != 0 {
		t.Fatalf("Stop past its deadline left the lease: %v", live)
	}
	select {
	case <-m.Stopped():
		t.Fatal("Stopped closed while a function still runs")
	default:
	}
	close(release)
	<-done
	select {
	case <-m.Stopped():
	case <-time.After(30 * time.Second):
		t.Fatal("Stopped not closed after the straggler returned")
	}
}

// blackhole is a membership store that can stop answering: while on, every
// call waits until its context ends, as a call to an unreachable database
// does.
type blackhole struct {
	partition.Membership
	on atomic.Bool
}

func (b *blackhole) hole(ctx context.Context) error {
	if !b.on.Load() {
		return nil
	}
	<-ctx.Done()
	return context.Cause(ctx)
}

func (b *blackhole) Heartbeat(ctx context.Context, name string, inc int64, ttl time.Duration) error {
	if err := b.hole(ctx); err != nil {
		return err
	}
	return b.Membership.Heartbeat(ctx, name, inc, ttl)
}

func (b *blackhole) Join(ctx context.Context, m partition.MemberInfo, ttl time.Duration) (partition.MemberInfo, error) {
	if err := b.hole(ctx); err != nil {
		return partition.MemberInfo{}, err
	}
	return b.Membership.Join(ctx, m, ttl)
}

func (b *blackhole) Live(ctx context.Context) ([]partition.MemberInfo, error) {
	if err := b.hole(ctx); err != nil {
		return nil, err
	}
	return b.Membership.Live(ctx)
}

// A member whose store stops answering refuses calls on its own clock
// (TTL − Margin after the last heartbeat it sent), and gives its lease up
// when the lease could have expired (TTL after it): it cancels the function
// it runs — it does not wait for a heartbeat that hangs. When the store
// answers again, it claims its partitions anew and serves.
func TestUnreachableStoreStopsTheMember(t *testing.T) {
	t.Parallel()
	bh := &blackhole{Membership: newMemory(nil)}
	cfg := testConfig
	cfg.Name = "solo"
	m, _ := startMember(t, bh, cfg)
	started, result := make(chan partition.Epoch, 1), make(chan error, 1)
	go func() {
		result <- m.Do(ctx, "k", func(ctx context.Context, e partition.Epoch) error {
			started <- e
			<-ctx.Done()
			return ctx.Err() // as a database driver does: context.Canceled, not the cause
		})
	}()
	before := <-started
	bh.on.Store(true)
	select {
	case err := <-result:
		if !errors.Is(err, partition.ErrMoving) || !strings.Contains(err.Error(), partition.ReasonLeaseLost) {
			t.Fatalf("the running function ended with %v, want ErrMoving for a lost lease", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the running function was not cancelled while the store did not answer")
	}
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrMoving) {
		t.Fatalf("Do without a lease = %v, want ErrMoving", err)
	}
	bh.on.Store(false)
	var after partition.Epoch
	if err := doOwned(m, "k", func(_ context.Context, e partition.Epoch) error { after = e; return nil }); err != nil {
		t.Fatalf("Do once the store answers again: %v", err)
	}
	if after.Token <= before.Token {
		t.Fatalf("epoch %d after %d: the partition was not claimed anew", after.Token, before.Token)
	}
}

// A function still running when its partition is handed over past
// DrainTimeout is cancelled; when it returns its context's error, as
// database drivers do (context.Canceled, not the cause), Do answers
// ErrMoving — the caller did not cancel anything, and retries at the new
// owner — not a bare context.Canceled.
func TestDrainTimeoutAnswersMoving(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.new(t)
			cfg := testConfig
			cfg.TTL = 5 * time.Second // no lease lost on a loaded machine: only the handoff cancels
			cfg.DrainTimeout = 50 * time.Millisecond
			f := newFleet(t, store, cfg)
			a := f.start("a")
			key := keyOn(t, "b", "a", "b")
			started, result := make(chan struct{}), make(chan error, 1)
			go func() {
				result <- doStarted(a, key, func(ctx context.Context, _ partition.Epoch) error {
					close(started)
					<-ctx.Done()
					return ctx.Err()
				})
			}()
			select {
			case <-started:
			case err := <-result:
				t.Fatalf("the call on a never ran: %v", err)
			}
			f.start("b") // the ring now places key's partition on b: a hands it off
			select {
			case err := <-result:
				if !errors.Is(err, partition.ErrMoving) {
					t.Fatalf("Do whose function was cancelled by the handoff = %v, want ErrMoving", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the running function was not cancelled after DrainTimeout")
			}
		})
	}
}

// failingRelease is a membership store whose first Releases fail without
// releasing anything, as a release that timed out on a loaded database does.
type failingRelease struct {
	partition.Membership
	fails atomic.Int32 // Releases left to fail
}

func (s *failingRelease) Release(ctx context.Context, es []partition.Epoch) error {
	if s.fails.Add(-1) >= 0 {
		return errors.New("release timed out")
	}
	return s.Membership.Release(ctx, es)
}

// A handoff whose release fails leaves rows the member owns but no longer
// runs; the new owner cannot claim them while the member lives. The member
// releases them again at its next steps, and the fleet settles.
func TestFailedReleaseIsRetried(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := &failingRelease{Membership: b.new(t)}
			store.fails.Store(2)
			cfg := testConfig
			cfg.TTL = 5 * time.Second // no lease expires on a loaded machine: only releases move partitions
			f := newFleet(t, store, cfg)
			f.start("a")
			f.start("b") // a hands off what the ring now places on b; the release fails, and its retry
			f.settled(30 * time.Second)
			f.w.check()
			if n := store.fails.Load(); n >= 0 {
				t.Fatalf("%d failing releases left: the partitions moved without the releases this test fails", n+1)
			}
		})
	}
}

// keyOn returns a key whose partition the ring of members places on owner.
func keyOn(t *testing.T, owner string, members ...string) string {
	t.Helper()
	r, err := partition.NewRing(members, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if k := fmt.Sprint("k", i); r.Owner(r.Partition(k)) == owner {
			return k
		}
	}
}

// doStarted calls m.Do until fn has started or Do answers something other
// than ErrMoving (on a loaded machine a member may be between leases for a
// moment), and returns the answer of the call that ran fn.
func doStarted(m *partition.Member, key string, fn func(context.Context, partition.Epoch) error) error {
	for deadline := time.Now().Add(30 * time.Second); ; {
		ran := false
		err := m.Do(ctx, key, func(ctx context.Context, e partition.Epoch) error { ran = true; return fn(ctx, e) })
		if ran || !errors.Is(err, partition.ErrMoving) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A member's owned partitions go up as it claims and back to zero as it
// stops, each stop counted with its cause; a call after Stop is refused as
// stopped; with a TracerProvider each call is a span with its partition and
// epoch.
func TestMemberOwnershipIsCounted(t *testing.T) {
	t.Parallel()
	tel := telemetrytest.New(t)
	cfg := testConfig
	cfg.MeterProvider, cfg.TracerProvider = tel.Meters, tel.Tracers
	m, _ := startMember(t, newMemory(nil), cfg)
	parts := int64(m.Ring().Partitions())
	if n := tel.Sum(t, "lockfree.partition.owned"); n != parts {
		t.Fatalf("owned = %d after start, want %d\n%s", n, parts, tel.Describe(t))
	}
	var epoch partition.Epoch
	if err := doOwned(m, "k", func(_ context.Context, e partition.Epoch) error { epoch = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrStopped) {
		t.Fatalf("Do after Stop: %v", err)
	}
	if n := tel.Sum(t, "lockfree.partition.owned"); n != 0 {
		t.Errorf("owned = %d after stop, want 0\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.partition.stops"); n != parts {
		t.Errorf("stops = %d, want %d\n%s", n, parts, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.partition.calls.refused", attribute.String(telemetry.Cause, "stopped")); n != 1 {
		t.Errorf("refused as stopped = %d, want 1\n%s", n, tel.Describe(t))
	}
	if n := tel.Sum(t, "lockfree.partition.handovers"); n != 0 {
		t.Errorf("handovers = %d on a fleet of one", n)
	}
	var served int
	for _, s := range tel.SpansNamed("partition.Do") {
		p, _ := telemetrytest.Attr(s, telemetry.Partition)
		ep, ok := telemetrytest.Attr(s, telemetry.Epoch)
		if ok && int(p.AsInt64()) == epoch.Partition && ep.AsInt64() == epoch.Token {
			served++
		}
	}
	if served == 0 {
		t.Errorf("no partition.Do span with partition %d epoch %d", epoch.Partition, epoch.Token)
	}
}

// Stop with a context that has already ended still stops the member, as
// its doc promises: it takes no more calls, its executors stop, its lease
// ends, and Stopped closes. It returns the context's cause.
func TestStopWithEndedContext(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := b.new(t)
			cfg := testConfig
			cfg.Name = "solo"
			m, _ := startMember(t, store, cfg)
			if err := doOwned(m, "k", func(context.Context, partition.Epoch) error { return nil }); err != nil {
				t.Fatal(err)
			}
			ended, cancel := context.WithCancel(ctx)
			cancel()
			if err := m.Stop(ended); !errors.Is(err, context.Canceled) {
				t.Fatalf("Stop(ended context) = %v, want context.Canceled", err)
			}
			if err := m.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrStopped) {
				t.Fatalf("Do after Stop(ended context) = %v, want ErrStopped", err)
			}
			if owned := m.Owned(); len(owned) != 0 {
				t.Fatalf("Stop(ended context) left %d executors", len(owned))
			}
			if live, err := store.Live(ctx); err != nil || len(live) != 0 {
				t.Fatalf("Stop(ended context) left the lease: %v %v", live, err)
			}
			select {
			case <-m.Stopped():
			case <-time.After(30 * time.Second):
				t.Fatal("Stopped not closed after Stop(ended context)")
			}
		})
	}
}

// joinCounter counts the Join calls of a store.
type joinCounter struct {
	partition.Membership
	joins atomic.Int32
}

func (j *joinCounter) Join(ctx context.Context, m partition.MemberInfo, ttl time.Duration) (partition.MemberInfo, error) {
	j.joins.Add(1)
	return j.Membership.Join(ctx, m, ttl)
}

// Stop, even with a context that has already ended, ends a Start in
// progress (here one waiting for its name, held by a live lease): Start
// returns ErrStopped, and the member never runs.
func TestStopEndsStartInProgress(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			store := &joinCounter{Membership: b.new(t)}
			cfg := testConfig
			cfg.Name = "solo"
			startMember(t, store, cfg) // holds the name
			second, err := partition.NewMember(store, &cfg)
			if err != nil {
				t.Fatal(err)
			}
			joins := store.joins.Load()
			sctx, cancelStart := context.WithTimeout(ctx, 20*time.Second)
			defer cancelStart()
			started := make(chan error, 1)
			go func() { started <- second.Start(sctx) }()
			waitFor(t, 30*time.Second, func() bool { return store.joins.Load() > joins }) // Start waits for the name
			ended, cancel := context.WithCancel(ctx)
			cancel()
			stopErr := second.Stop(ended)
			select {
			case err := <-started:
				if !errors.Is(err, partition.ErrStopped) {
					t.Fatalf("Start ended by Stop = %v, want ErrStopped", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("Start went on after Stop")
			}
			if stopErr != nil {
				t.Fatalf("Stop of a member whose Start it ended = %v", stopErr)
			}
			if err := second.Do(ctx, "k", func(context.Context, partition.Epoch) error { return nil }); !errors.Is(err, partition.ErrStopped) {
				t.Fatalf("Do after Stop = %v, want ErrStopped", err)
			}
			select {
			case <-second.Stopped():
			case <-time.After(30 * time.Second):
				t.Fatal("Stopped not closed")
			}
		})
	}
}
