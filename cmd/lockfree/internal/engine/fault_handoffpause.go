package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// HandoffPause stops a partition member with SIGSTOP in a handoff — after it
// drained the partitions the ring moved away from it, before it releases
// them — and resumes it once its lease has run out and other members have
// claimed every partition it held: its release then reaches the store after
// their claims, a stale release the store must refuse by (owner, epoch).
// The handoff is brought about by the late-heartbeat hold of another
// member: the ring moves partitions when that member's lease lapses and
// again when it rejoins.
const HandoffPause Fault = "handoff-pause"

type handoffPause struct{}

func (handoffPause) Name() Fault { return HandoffPause }
func (handoffPause) How() string {
	return "SIGSTOPs of a partition member after its handoff's drain, before its release, resumed once its lease ran out and others claimed every partition it held"
}
func (handoffPause) counts() string {
	return "other members claimed every partition it held before it resumed"
}
func (handoffPause) start(r *run) injector                   { return handoffPauseRun{r} }
func (handoffPause) skip(_ Scenario, def ApproachDef) string { return memberSkip(def) }

type handoffPauseRun struct{ r *run }

// inject arms every worker but v to stop at its next
// before-release point, holds v's heartbeats past its lease and a takeover
// (the ring moves partitions), lets v rejoin (it moves them back), and stops
// the first worker that reaches the point; it resumes that worker once its
// lease has run out and every partition it held was claimed by another.
func (h handoffPauseRun) inject(ctx context.Context, v *proc) {
	r := h.r
	t0 := history.Now()
	stop := arm{Mode: modeStop, Point: pointBeforeRelease}
	for _, p := range r.fleet.others(v) {
		p.command(command{Cmd: cmdArm, Arm: &stop})
	}
	_, taken, ok := holdHeartbeats(ctx, r, HandoffPause, v)
	v.command(command{Cmd: cmdClear})
	var b pointSeen
	stopped := ok && taken != 0 && r.mon.wait(ctx, r.takeoverBound(), func() bool {
		var seen bool
		b, seen = r.mon.pointAtLocked(pointBeforeRelease, t0)
		return seen
	})
	for _, p := range r.fleet.others(v) {
		p.command(command{Cmd: cmdDisarm})
	}
	if !stopped {
		if ctx.Err() == nil && ok {
			r.log.note("%s: no member reached its release after worker %d's heartbeats were held (claimed from it: %v)", HandoffPause, v.client, taken != 0)
		}
		resumeReleases(ctx, r, t0)
		return
	}
	stopInHandoff(ctx, r, b)
	resumeReleases(ctx, r, t0)
}

// stopInHandoff waits until the worker that stopped at its before-release
// point (b) is seen stopped, its lease has run out and other members claimed
// every partition it held, resumes it, and counts the fault.
func stopInHandoff(ctx context.Context, r *run, b pointSeen) {
	w := r.fleet.of(b.client)
	if poll(ctx, 5*time.Second, func() bool { s, err := w.stopped(); return s || err != nil }); !isStopped(w) {
		if ctx.Err() == nil {
			r.log.note("%s: worker %d was not seen stopped at its release; not counted", HandoffPause, b.client)
		}
		return
	}
	var held int
	r.mon.mu.Lock()
	held = len(r.mon.ownedAtLocked(b.client, b.ev.T))
	r.mon.mu.Unlock()
	var taken history.Time
	if Sleep(ctx, time.Duration(b.ev.T-history.Now())+r.prot.Lease+r.margin()) {
		r.mon.wait(ctx, r.takeoverBound(), func() bool {
			taken = r.mon.claimedFromLocked(b.client, b.ev.T, true)
			return taken != 0
		})
	}
	_ = w.signal(sigCont)
	end := history.Now()
	switch {
	case taken != 0:
		r.log.count(HandoffPause)
		r.log.span(b.client, report.SpanPause, b.ev.T, end, fmt.Sprintf("SIGSTOP in a handoff, before its release; its %d partitions claimed by others", held))
		// Its release goes on now: let it reach the store before the
		// next fault.
		r.mon.wait(ctx, r.reachBound(), func() bool { return r.mon.resumedLocked(b.client, b.ev.T) })
	case ctx.Err() == nil:
		r.log.note("%s: the %d partitions of worker %d were not all claimed by others within %v past its lease; not counted", HandoffPause, held, b.client, r.takeoverBound())
	}
}

func isStopped(p *proc) bool {
	s, _ := p.stopped()
	return s
}

// resumeReleases sends SIGCONT to every worker stopped at its before-release
// point since t that has not resumed: two may have reached it before the
// others were disarmed. One that fired as it was disarmed has its event on
// the way: it is waited for, a second at most.
func resumeReleases(ctx context.Context, r *run, t history.Time) {
	var stopped []int
	stuck := func() bool {
		stopped = stopped[:0]
		for _, p := range r.mon.points {
			if p.ev.Ev == evPoint && p.ev.Name == pointBeforeRelease && p.ev.T >= t && !r.mon.resumedLocked(p.client, p.ev.T) {
				stopped = append(stopped, p.client)
			}
		}
		return len(stopped) > 0
	}
	for range 2 {
		if !r.mon.wait(context.WithoutCancel(ctx), time.Second, stuck) {
			return
		}
		for _, c := range stopped {
			_ = r.fleet.of(c).signal(sigCont)
		}
		// Resumed, each reports it before it goes on.
		r.mon.wait(context.WithoutCancel(ctx), r.reachBound(), func() bool { return !stuck() })
	}
}

// pointAtLocked returns the first point event at the point name since t.
func (m *monitor) pointAtLocked(name string, t history.Time) (pointSeen, bool) {
	for _, p := range m.points {
		if p.ev.Ev == evPoint && p.ev.Name == name && p.ev.T >= t {
			return p, true
		}
	}
	return pointSeen{}, false
}

// resumedLocked reports whether client resumed from a point after t.
func (m *monitor) resumedLocked(client int, t history.Time) bool {
	for _, p := range m.points {
		if p.client == client && p.ev.Ev == evResumed && p.ev.T >= t {
			return true
		}
	}
	return false
}
