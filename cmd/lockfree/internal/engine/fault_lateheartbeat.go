package engine

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// LateHeartbeat holds a partition member's background work — its heartbeats
// and its steps (which read the fleet and heartbeat again once the renewal
// loop gave up) — at their points, past its lease and until another member
// claimed one of its partitions, while its calls go on: a member whose
// membership store stopped answering while its data store still does, or
// whose background goroutines starved. Its own check of its lease must stop
// its calls: no heartbeat answered, so the lease is not safely held. Every
// other time (the first among them) the others' claims are held instead,
// after they read the fleet without it, until it rejoined and claimed its
// partitions again: stale claims the store must refuse, its owner live.
const LateHeartbeat Fault = "late-heartbeat"

// The points of a partition member's background work.
const (
	pointHeartbeat     = "partition.member.heartbeat"
	pointReconcile     = "partition.member.reconcile"
	pointBeforeClaim   = "partition.member.before-claim"
	pointBeforeRelease = "partition.member.before-release"
)

// modeLate arms a worker's member points (lateGate): every heartbeat and
// step blocks there until cmdClear.
const modeLate = "late"

type lateHeartbeat struct{}

func (lateHeartbeat) Name() Fault { return LateHeartbeat }
func (lateHeartbeat) How() string {
	return "holds of a partition member's heartbeats and steps past its lease, its calls going on, until another member claimed one of its partitions (every other time: until it is back, the others' claims held)"
}
func (lateHeartbeat) counts() string {
	return "another member claimed one of its partitions and its calls went on; or it claimed them again, theirs held"
}
func (lateHeartbeat) start(r *run) injector                   { return &lateHeartbeatRun{r: r} }
func (lateHeartbeat) agent(w *worker) agent                   { return &lateGate{out: w.out, halt: w.haltCh} }
func (lateHeartbeat) skip(_ Scenario, def ApproachDef) string { return memberSkip(def) }

// memberSkip says why the member faults cannot take effect in def's runs.
func memberSkip(def ApproachDef) string {
	if _, ok := def.(MemberRunner); ok {
		return ""
	}
	return "its workers run no partition member whose heartbeats or handoffs could be held"
}

// lateGate is a worker's part of the fault: it blocks the goroutines that
// reach a member's heartbeat or step while it is armed, until it is
// cleared: unlike a before-write arm, it holds every such goroutine, and
// the next ones, not only the first.
type lateGate struct {
	out   *emitter
	halt  <-chan struct{} // the worker's halt
	mu    sync.Mutex
	open  chan struct{} // non-nil while armed; closed by clear
	fired bool          // the first blocked goroutine reported the point
}

// command arms the gate when c asks for it.
func (g *lateGate) command(c command) bool {
	if c.Cmd != cmdArm || c.Arm == nil || c.Arm.Mode != modeLate {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == nil {
		g.open, g.fired = make(chan struct{}), false
	}
	return true
}

func (g *lateGate) clear() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open != nil {
		close(g.open)
		g.open = nil
	}
}

// point handles a partition member's heartbeat and step: they block while
// the gate is armed. The block ignores the goroutine's context, as a
// starved goroutine would (a heartbeat's context ends at the lease's
// deadline): it ends when the coordinator clears it, or the worker halts.
func (g *lateGate) point(_ context.Context, name string) bool {
	if name != pointHeartbeat && name != pointReconcile {
		return false
	}
	g.mu.Lock()
	open, first := g.open, g.open != nil && !g.fired
	if first {
		g.fired = true
	}
	g.mu.Unlock()
	if open == nil {
		return true
	}
	if first && g.out.event(event{Ev: evPoint, T: history.Now(), Name: name, Mode: modeLate}) != nil {
		return true // the coordinator cannot know of the fault: do not inject it
	}
	t := time.NewTimer(maxBlock)
	defer t.Stop()
	select {
	case <-open:
	case <-g.halt:
	case <-t.C:
	}
	return true
}

// holdHeartbeats holds v's heartbeats and steps (a late gate) from their
// next point on, and waits until v's lease has run out and another member
// has claimed a partition v owned; it returns the point, and when that
// claim returned (0 when none came within the bound). The gate stays armed:
// the caller clears it.
func holdHeartbeats(ctx context.Context, r *run, f Fault, v *proc) (event, history.Time, bool) {
	at, ok, lapsed := holdPastLease(ctx, r, f, v)
	if !ok || !lapsed {
		return at, 0, ok
	}
	var taken history.Time
	r.mon.wait(ctx, r.takeoverBound(), func() bool {
		taken = r.mon.claimedFromLocked(v.client, at.T, false)
		return taken != 0
	})
	return at, taken, true
}

// holdPastLease holds v's heartbeats and steps (a late gate) from their
// next point on, and waits until v's lease has run out; it returns the
// point, whether v reached it, and whether the lease ran out before ctx
// ended. The gate stays armed: the caller clears it.
func holdPastLease(ctx context.Context, r *run, f Fault, v *proc) (at event, ok, lapsed bool) {
	at, ok = r.armPoint(ctx, f, v, arm{Mode: modeLate})
	if !ok {
		return at, false, false
	}
	// The last heartbeat was sent before the point: the lease runs out on
	// the server within the lease of the point.
	return at, true, Sleep(ctx, time.Duration(at.T-history.Now())+r.prot.Lease+r.margin())
}

type lateHeartbeatRun struct {
	r *run
	n atomic.Int64 // injections, stale claims or not
}

// inject holds v's heartbeats and steps past its lease, until another
// member claimed one of its partitions, for twice the lease and a margin at
// least, and until a call of v's is seen under way after the claim; it then
// lets them go on, counts the fault, and waits for v to rejoin. Every other
// time (the first among them) it holds the claims instead (staleClaims).
func (l *lateHeartbeatRun) inject(ctx context.Context, v *proc) {
	r := l.r
	if l.n.Add(1)%2 == 1 {
		staleClaims(ctx, r, v)
		return
	}
	at, taken, ok := holdHeartbeats(ctx, r, LateHeartbeat, v)
	if !ok {
		return
	}
	// Calls that v ran in the hold would begin well after its lease had
	// certainly ended: what the exclusivity check (history.Lapses) sees.
	Sleep(ctx, time.Duration(at.T+history.Time(2*r.prot.Lease+r.margin())-history.Now()))
	called := taken != 0 && r.mon.wait(ctx, r.reachBound(), func() bool { return r.mon.callingLocked(v.client, taken) })
	v.command(command{Cmd: cmdClear})
	end := history.Now()
	switch {
	case taken != 0 && called:
		r.log.count(LateHeartbeat)
		r.log.span(v.client, report.SpanStall, at.T, end, "heartbeats held past the lease; a partition claimed by another member")
	case ctx.Err() != nil:
		return
	case taken == 0:
		r.log.note("%s: no member claimed a partition of worker %d within %v past its lease; not counted", LateHeartbeat, v.client, r.takeoverBound())
		return
	default:
		r.log.note("%s: worker %d made no call after its partition was claimed; not counted", LateHeartbeat, v.client)
	}
	r.mon.wait(ctx, r.takeoverBound(), func() bool { return r.mon.joinedLocked(v.client, end) })
}

// staleClaims arms every worker but v to wait at its next claim, holds v's
// heartbeats and steps past its lease until another member, reading the
// fleet without v, chose to claim (and waits there), lets v go on, and once
// v has rejoined and claimed its partitions again, lets the claims go on:
// claims from a view that went stale, of partitions whose owner is live.
// The store must refuse them. It counts the fault when v claimed again
// while a claim was held; the claimer's step has a lease's time in all.
func staleClaims(ctx context.Context, r *run, v *proc) {
	others := r.fleet.others(v)
	hold := arm{Mode: modeWait, Point: pointBeforeClaim}
	for _, p := range others {
		p.command(command{Cmd: cmdArm, Arm: &hold})
	}
	defer func() {
		for _, p := range others {
			p.command(command{Cmd: cmdClear})
		}
	}()
	at, ok, lapsed := holdPastLease(ctx, r, LateHeartbeat, v)
	if !ok {
		return
	}
	var b pointSeen
	held := lapsed && r.mon.wait(ctx, r.takeoverBound(), func() bool {
		var seen bool
		b, seen = r.mon.pointAtLocked(pointBeforeClaim, at.T)
		return seen
	})
	for _, p := range others {
		p.command(command{Cmd: cmdDisarm})
	}
	v.command(command{Cmd: cmdClear})
	end := history.Now()
	again := held && r.mon.wait(ctx, r.prot.Lease, func() bool { return r.mon.claimedByLocked(v.client, end) })
	switch {
	case again:
		r.log.count(LateHeartbeat)
		r.log.span(v.client, report.SpanStall, at.T, end, fmt.Sprintf("heartbeats held past the lease; worker %d's claim of its partitions held until it had claimed them again", b.client))
	case ctx.Err() != nil:
	case !held:
		r.log.note("%s: no member set out to claim a partition of worker %d within %v past its lease; not counted", LateHeartbeat, v.client, r.takeoverBound())
	default:
		r.log.note("%s: worker %d claimed no partition within %v of rejoining; not counted", LateHeartbeat, v.client, r.prot.Lease)
	}
}

// claimedByLocked reports whether client claimed a partition after t.
func (m *monitor) claimedByLocked(client int, t history.Time) bool {
	for _, ev := range m.owners[client] {
		if ev.Ev == evClaim && ev.T > t {
			return true
		}
	}
	return false
}

// claimedFromLocked returns when another client's claim of a partition
// that client held at t (its last claim before t, not released since) first
// returned after t, or 0 when none did; with all, only once every such
// partition was claimed by another.
func (m *monitor) claimedFromLocked(client int, t history.Time, all bool) history.Time {
	held := m.ownedAtLocked(client, t)
	first := map[string]history.Time{}
	for c, evs := range m.owners {
		if c == client {
			continue
		}
		for _, ev := range evs {
			if ev.Ev == evClaim && ev.T > t && held[ev.Name] && first[ev.Name] == 0 {
				first[ev.Name] = ev.T
			}
		}
	}
	if len(first) == 0 || all && len(first) < len(held) {
		return 0
	}
	var out history.Time // the first claim, or with all the last
	for _, at := range first {
		if out == 0 || (!all && at < out) || (all && at > out) {
			out = at
		}
	}
	return out
}

// ownedAtLocked returns the partitions whose last claim before t was
// client's, and that client has not released since.
func (m *monitor) ownedAtLocked(client int, t history.Time) map[string]bool {
	type claim struct {
		client int
		at     history.Time
	}
	last := map[string]claim{}
	for c, evs := range m.owners {
		for _, ev := range evs {
			if ev.Ev == evClaim && ev.T < t && ev.T >= last[ev.Name].at {
				last[ev.Name] = claim{c, ev.T}
			}
		}
	}
	held := map[string]bool{}
	for name, cl := range last {
		if cl.client == client {
			held[name] = true
		}
	}
	for _, ev := range m.owners[client] {
		if ev.Ev == evDisown && ev.T > last[ev.Name].at && ev.T < t {
			delete(held, ev.Name)
		}
	}
	return held
}

// callingLocked reports whether client has an operation under way, or
// completed one after t: a member's operation asks its member again and
// again while the partition is not safely held.
func (m *monitor) callingLocked(client int, t history.Time) bool {
	_, _, open := m.openOpLocked(client)
	return open || m.lastDone[client] > t
}

// joinedLocked reports whether client was granted a membership lease by a
// request sent after t.
func (m *monitor) joinedLocked(client int, t history.Time) bool {
	for _, ev := range m.owners[client] {
		if ev.Ev == evMember && ev.Sent > t {
			return true
		}
	}
	return false
}
