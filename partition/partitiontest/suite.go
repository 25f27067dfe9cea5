// Package partitiontest is the behaviour suite every partition.Membership
// must pass, in the manner of testing/slogtest: the memory and PostgreSQL
// backends run it, and so can any other implementation.
package partitiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockfree-go/lockfree/partition"
)

// Harness is a store under test and control of its clock.
type Harness struct {
	Store partition.Membership
	// TTL is the lease used by tests that let leases expire: short on a
	// real clock (a few hundred milliseconds), anything on a manual one.
	TTL time.Duration
	// Advance lets d pass on the store's clock: it moves a manual clock
	// forward, or sleeps when the store uses a real one.
	Advance func(d time.Duration)
}

// Run runs the suite; newHarness is called once per subtest and must return
// an empty store.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"JoinLiveLeave", testJoinLiveLeave},
		{"NameInUseUntilExpiry", testNameInUse},
		{"HeartbeatNeverRevives", testHeartbeat},
		{"LeavingStaysLive", testLeaving},
		{"ClaimReleaseAndEpochs", testClaimRelease},
		{"ClaimAfterOwnerExpired", testClaimAfterExpiry},
		{"ClaimNeedsLiveLease", testClaimNeedsLease},
		{"BadInputWritesNothing", testBadInput},
		{"ConcurrentClaims", testConcurrentClaims},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.fn(t, newHarness(t))
		})
	}
}

var ctx = context.Background()

func join(t *testing.T, s partition.Membership, name string, ttl time.Duration) partition.MemberInfo {
	t.Helper()
	m, err := s.Join(ctx, partition.MemberInfo{Name: name, Addr: name + ":80", Ring: "ring-1"}, ttl)
	if err != nil {
		t.Fatalf("Join(%q): %v", name, err)
	}
	if m.Incarnation <= 0 || m.Name != name || m.Addr != name+":80" || m.Ring != "ring-1" || m.Leaving {
		t.Fatalf("Join(%q) = %+v", name, m)
	}
	return m
}

func live(t *testing.T, s partition.Membership) []string {
	t.Helper()
	ms, err := s.Live(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	return names
}

func claim(t *testing.T, s partition.Membership, m partition.MemberInfo, ps ...int) []partition.Epoch {
	t.Helper()
	es, err := s.Claim(ctx, m.Name, m.Incarnation, ps)
	if err != nil {
		t.Fatalf("Claim(%q, %v): %v", m.Name, ps, err)
	}
	return es
}

// expire lets a lease of ttl lapse and waits until the store agrees.
func expire(t *testing.T, h Harness, name string, ttl time.Duration) {
	t.Helper()
	h.Advance(ttl + ttl/2)
	for i := 0; ; i++ {
		found := false
		for _, n := range live(t, h.Store) {
			found = found || n == name
		}
		if !found {
			return
		}
		if i == 200 {
			t.Fatalf("lease of %q never expired", name)
		}
		h.Advance(ttl / 10)
	}
}

func testJoinLiveLeave(t *testing.T, h Harness) {
	b := join(t, h.Store, "b", time.Minute)
	a := join(t, h.Store, "a", time.Minute)
	if a.Incarnation <= b.Incarnation {
		t.Fatalf("incarnations %d then %d", b.Incarnation, a.Incarnation)
	}
	if got := fmt.Sprint(live(t, h.Store)); got != "[a b]" {
		t.Fatalf("Live = %s, want [a b] in order", got)
	}
	if err := h.Store.Leave(ctx, a.Name, a.Incarnation); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Leave(ctx, a.Name, a.Incarnation); err != nil {
		t.Fatalf("second Leave: %v", err)
	}
	if err := h.Store.Leave(ctx, b.Name, b.Incarnation+1000); err != nil {
		t.Fatalf("Leave of an unknown incarnation: %v", err)
	}
	if got := fmt.Sprint(live(t, h.Store)); got != "[b]" {
		t.Fatalf("Live = %s after a left (b's lease must survive a stale Leave)", got)
	}
}

func testNameInUse(t *testing.T, h Harness) {
	a := join(t, h.Store, "a", h.TTL)
	_, err := h.Store.Join(ctx, partition.MemberInfo{Name: "a"}, h.TTL)
	if !errors.Is(err, partition.ErrNameInUse) {
		t.Fatalf("second Join: %v, want ErrNameInUse", err)
	}
	expire(t, h, "a", h.TTL)
	a2 := join(t, h.Store, "a", time.Minute)
	if a2.Incarnation <= a.Incarnation {
		t.Fatalf("incarnation %d after %d", a2.Incarnation, a.Incarnation)
	}
}

func testHeartbeat(t *testing.T, h Harness) {
	a := join(t, h.Store, "a", h.TTL)
	if err := h.Store.Heartbeat(ctx, "a", a.Incarnation, h.TTL); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Heartbeat(ctx, "a", a.Incarnation+1, h.TTL); !errors.Is(err, partition.ErrExpired) {
		t.Fatalf("heartbeat of another incarnation: %v", err)
	}
	expire(t, h, "a", h.TTL)
	if err := h.Store.Heartbeat(ctx, "a", a.Incarnation, h.TTL); !errors.Is(err, partition.ErrExpired) {
		t.Fatalf("heartbeat after expiry: %v, want ErrExpired", err)
	}
	if n := live(t, h.Store); len(n) != 0 {
		t.Fatalf("heartbeat revived the lease: %v", n)
	}
	a2 := join(t, h.Store, "a", time.Minute)
	if err := h.Store.Heartbeat(ctx, "a", a.Incarnation, h.TTL); !errors.Is(err, partition.ErrExpired) {
		t.Fatalf("old incarnation renewed the new one: %v", err)
	}
	if err := h.Store.Heartbeat(ctx, "a", a2.Incarnation, time.Minute); err != nil {
		t.Fatal(err)
	}
}

func testLeaving(t *testing.T, h Harness) {
	a := join(t, h.Store, "a", time.Minute)
	b := join(t, h.Store, "b", time.Minute)
	if es := claim(t, h.Store, a, 3); len(es) != 1 {
		t.Fatalf("claim: %v", es)
	}
	if err := h.Store.SetLeaving(ctx, "a", a.Incarnation); err != nil {
		t.Fatal(err)
	}
	ms, _ := h.Store.Live(ctx)
	if len(ms) != 2 || !ms[0].Leaving || ms[1].Leaving {
		t.Fatalf("Live = %+v, want a leaving and b not", ms)
	}
	if es := claim(t, h.Store, b, 3); len(es) != 0 {
		t.Fatalf("b claimed a leaving member's partition before release: %v", es)
	}
	if err := h.Store.SetLeaving(ctx, "a", a.Incarnation+7); !errors.Is(err, partition.ErrExpired) {
		t.Fatalf("SetLeaving of another incarnation: %v", err)
	}
}

func testClaimRelease(t *testing.T, h Harness) {
	a := join(t, h.Store, "a", time.Minute)
	b := join(t, h.Store, "b", time.Minute)
	es := claim(t, h.Store, a, 0, 1, 2)
	if fmt.Sprint(es) != "[{0 a 1} {1 a 1} {2 a 1}]" {
		t.Fatalf("claim = %v", es)
	}
	owners, err := h.Store.Owners(ctx, 4)
	if err != nil || fmt.Sprint(owners) != "[{0 a 1} {1 a 1} {2 a 1} {3  0}]" {
		t.Fatalf("Owners = %v, %v", owners, err)
	}
	if got := claim(t, h.Store, b, 1, 3); fmt.Sprint(got) != "[{3 b 1}]" {
		t.Fatalf("b's claim over a live owner = %v, want only partition 3", got)
	}
	if err := h.Store.Release(ctx, []partition.Epoch{es[1]}); err != nil {
		t.Fatal(err)
	}
	if err := h.Store.Check(ctx, es[1]); !errors.Is(err, partition.ErrStaleEpoch) {
		t.Fatalf("Check of a released epoch: %v", err)
	}
	owners, _ = h.Store.Owners(ctx, 2)
	if fmt.Sprint(owners[1]) != "{1  1}" {
		t.Fatalf("released row = %v, want no owner and epoch kept", owners[1])
	}
	got := claim(t, h.Store, b, 1)
	if fmt.Sprint(got) != "[{1 b 2}]" {
		t.Fatalf("claim after release = %v, want epoch 2", got)
	}
	var se *partition.StaleEpochError
	if err := h.Store.Check(ctx, es[1]); !errors.As(err, &se) || *se != (partition.StaleEpochError{Partition: 1, Presented: 1, Required: 2, Owner: "b"}) {
		t.Fatalf("Check of a superseded epoch: %v", err)
	}
	if err := h.Store.Check(ctx, got[0]); err != nil {
		t.Fatalf("Check of the current epoch: %v", err)
	}
	if err := h.Store.Release(ctx, []partition.Epoch{es[1], es[2]}); !errors.As(err, &se) || se.Owner != "b" || se.Required != 2 {
		t.Fatalf("stale Release: %v, want *StaleEpochError", err)
	}
	if owners, _ = h.Store.Owners(ctx, 3); fmt.Sprint(owners) != "[{0 a 1} {1 b 2} {2  1}]" {
		t.Fatalf("Owners = %v: a stale release must not free b's partition", owners)
	}
	// A member reclaiming its own partition (a restarted process) bumps.
	if got := claim(t, h.Store, a, 0); fmt.Sprint(got) != "[{0 a 2}]" {
		t.Fatalf("reclaim by the owner = %v, want epoch 2", got)
	}
}

func testClaimAfterExpiry(t *testing.T, h Harness) {
	a := join(t, h.Store, "a", h.TTL)
	b := join(t, h.Store, "b", time.Hour)
	es := claim(t, h.Store, a, 5)
	expire(t, h, "a", h.TTL)
	got := claim(t, h.Store, b, 5)
	if len(got) != 1 || got[0].Token != es[0].Token+1 || got[0].Owner != "b" {
		t.Fatalf("claim after expiry = %v", got)
	}
	if err := h.Store.Check(ctx, es[0]); !errors.Is(err, partition.ErrStaleEpoch) {
		t.Fatalf("Check of the expired owner's epoch: %v", err)
	}
}

func testClaimNeedsLease(t *testing.T, h Harness) {
	a := join(t, h.Store, "a", h.TTL)
	if _, err := h.Store.Claim(ctx, "a", a.Incarnation+1, []int{0}); !errors.Is(err, partition.ErrExpired) {
		t.Fatalf("claim with another incarnation: %v", err)
	}
	expire(t, h, "a", h.TTL)
	if _, err := h.Store.Claim(ctx, "a", a.Incarnation, []int{0}); !errors.Is(err, partition.ErrExpired) {
		t.Fatalf("claim after expiry: %v", err)
	}
	owners, _ := h.Store.Owners(ctx, 1)
	if owners[0].Owner != "" {
		t.Fatalf("an expired member claimed: %v", owners)
	}
}

func testBadInput(t *testing.T, h Harness) {
	longName := fmt.Sprintf("%0256d", 0)
	joins := []struct {
		m   partition.MemberInfo
		ttl time.Duration
	}{
		{partition.MemberInfo{Name: ""}, time.Second},
		{partition.MemberInfo{Name: longName}, time.Second},
		{partition.MemberInfo{Name: "nul\x00"}, time.Second},
		{partition.MemberInfo{Name: "bad\xff"}, time.Second},
		{partition.MemberInfo{Name: "a", Addr: longName}, time.Second},
		{partition.MemberInfo{Name: "a"}, 0},
		{partition.MemberInfo{Name: "a"}, -time.Second},
		{partition.MemberInfo{Name: "a"}, 2 * partition.MaxTTL},
	}
	for _, j := range joins {
		if _, err := h.Store.Join(ctx, j.m, j.ttl); !errors.Is(err, partition.ErrInvalid) {
			t.Errorf("Join(%q, %v) = %v, want ErrInvalid", j.m.Name, j.ttl, err)
		}
	}
	if n := live(t, h.Store); len(n) != 0 {
		t.Fatalf("bad joins wrote members: %v", n)
	}
	a := join(t, h.Store, "a", time.Minute)
	for _, ps := range [][]int{{-1}, {2, 1}, {1, 1}, {partition.MaxPartitions}} {
		if _, err := h.Store.Claim(ctx, "a", a.Incarnation, ps); !errors.Is(err, partition.ErrInvalid) {
			t.Errorf("Claim(%v) = %v, want ErrInvalid", ps, err)
		}
	}
	if _, err := h.Store.Claim(ctx, "a", 0, []int{1}); !errors.Is(err, partition.ErrInvalid) {
		t.Errorf("Claim with incarnation 0: %v", err)
	}
	for _, e := range []partition.Epoch{{Partition: 0, Owner: "a"}, {Partition: -1, Owner: "a", Token: 1}, {Partition: 0, Token: 1}} {
		if err := h.Store.Release(ctx, []partition.Epoch{e}); !errors.Is(err, partition.ErrInvalid) {
			t.Errorf("Release(%v) = %v, want ErrInvalid", e, err)
		}
		if err := h.Store.Check(ctx, e); !errors.Is(err, partition.ErrInvalid) {
			t.Errorf("Check(%v) = %v, want ErrInvalid", e, err)
		}
	}
	for _, n := range []int{0, -1, partition.MaxPartitions + 1} {
		if _, err := h.Store.Owners(ctx, n); !errors.Is(err, partition.ErrInvalid) {
			t.Errorf("Owners(%d) = %v, want ErrInvalid", n, err)
		}
	}
	if err := h.Store.Heartbeat(ctx, "a", a.Incarnation, 0); !errors.Is(err, partition.ErrInvalid) {
		t.Errorf("Heartbeat with ttl 0: %v", err)
	}
	owners, _ := h.Store.Owners(ctx, 3)
	for _, o := range owners {
		if o.Owner != "" || o.Token != 0 {
			t.Fatalf("bad input wrote ownership: %v", owners)
		}
	}
}

func testConcurrentClaims(t *testing.T, h Harness) {
	const members, partitions = 8, 16
	infos := make([]partition.MemberInfo, members)
	for i := range infos {
		infos[i] = join(t, h.Store, fmt.Sprintf("m%d", i), time.Minute)
	}
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	var mu sync.Mutex
	won := map[int][]string{}
	var wg sync.WaitGroup
	for _, m := range infos {
		wg.Add(1)
		go func() {
			defer wg.Done()
			es, err := h.Store.Claim(ctx, m.Name, m.Incarnation, ps)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, e := range es {
				won[e.Partition] = append(won[e.Partition], e.Owner)
			}
		}()
	}
	wg.Wait()
	owners, _ := h.Store.Owners(ctx, partitions)
	for p := range partitions {
		if len(won[p]) != 1 || owners[p].Owner != won[p][0] || owners[p].Token != 1 {
			t.Errorf("partition %d: won by %v, row %v; want exactly one claim at epoch 1", p, won[p], owners[p])
		}
	}
}
