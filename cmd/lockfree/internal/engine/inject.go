package engine

import (
	"context"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
)

const sigCont = syscall.SIGCONT

// inject runs the run's faults until ctx ends: the whole-run ones each on
// its own, the others in turn, one at a time, round-robin over the workers.
func (r *run) inject(ctx context.Context) {
	var victims []injector
	var wg sync.WaitGroup
	for i, f := range r.cfg.Faults {
		k, _ := faultByName(f)
		if _, ok := k.(wholeRun); ok {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.injectors[i].inject(ctx, nil)
			}()
			continue
		}
		victims = append(victims, r.injectors[i])
	}
	for i, n := 0, 0; len(victims) > 0 && ctx.Err() == nil; n++ {
		v, active := r.fleet.victim(&i, r.mon)
		r.fleet.idle.Store(!active)
		if v == nil {
			Sleep(ctx, 10*time.Millisecond)
			continue
		}
		victims[n%len(victims)].inject(ctx, v)
	}
	wg.Wait()
}

// The steps below are those every fault that stops a worker at its
// before-write point takes: arm it, wait past its lease for another worker
// to take its key over, and let the others go on once it has written.

// margin is how long past a lease the engine waits before it counts the
// lease as expired: the server's clock started it a little after the point
// the worker stopped at, and a waiter polls.
func (r *run) margin() time.Duration { return max(100*time.Millisecond, r.prot.Lease/2) }

// reachBound bounds the wait for an armed worker to reach a before-write
// point: one operation, plus a lock wait; a second for an idle one.
func (r *run) reachBound() time.Duration {
	if r.fleet.idle.Load() {
		// A worker that has been doing nothing may go on doing nothing:
		// another may have become busy meanwhile.
		return time.Second
	}
	return 2*r.params.OpTimeout + time.Second
}

// takeoverBound bounds the wait for another worker to take over, after the
// lease: past it, the fault counts as injected, not taken over.
func (r *run) takeoverBound() time.Duration { return 5*time.Second + r.prot.Lease }

// armPoint arms v with a and waits until it fires; false (and a note) when
// v reaches no before-write point in time.
func (r *run) armPoint(ctx context.Context, f Fault, v *proc, a arm) (event, bool) {
	t0 := history.Now()
	v.command(command{Cmd: cmdArm, Arm: &a})
	var pt event
	fired := func() bool {
		var ok bool
		pt, ok = r.mon.pointLocked(v.client, evPoint, a.Mode, t0)
		return ok
	}
	if r.mon.wait(ctx, r.reachBound(), fired) {
		return pt, true
	}
	v.command(command{Cmd: cmdClear})
	// It may have fired as it was cleared: its event is on its way.
	if r.mon.wait(ctx, time.Second, fired) {
		return pt, true
	}
	if ctx.Err() == nil {
		r.log.note("%s: worker %d reached no before-write point within %v", f, v.client, r.reachBound())
	}
	return event{}, false
}

// stopped waits a few seconds for v to be seen stopped by the kernel
// (nothing announces a stop: /proc is polled), and reports whether it is.
func stopped(ctx context.Context, v *proc) bool {
	seen := poll(ctx, 5*time.Second, func() bool { s, err := v.stopped(); return s || err != nil })
	s, _ := v.stopped()
	return seen && s
}

// takeover waits until the victim's lease has run out (since its point, at)
// and another worker has taken its key over — held, if it can be, at its own
// before-write point, so that the victim's stale write lands between the
// other's read and write. It reports whether a takeover was seen before the
// bound.
func (r *run) takeover(ctx context.Context, v *proc, at event) bool {
	if at.Key != "" {
		r.holdOne(ctx, v, at)
	}
	expiry := time.Duration(at.T-history.Now()) + r.prot.Lease + r.margin()
	if !Sleep(ctx, expiry) {
		return false
	}
	taken := r.mon.wait(ctx, r.takeoverBound(), func() bool {
		return r.mon.takenOverLocked(v.client, at.Key, at.Token, at.T)
	})
	if taken {
		// The taker may be on its way to its point (it has the lease, its
		// read is under way): held there, it makes the interleaving that
		// shows a missing fence — the stale write between its read and
		// its write.
		r.mon.wait(ctx, r.reachBound(), func() bool { return len(r.mon.heldLocked(v.client, at.Key, at.T)) > 0 })
	}
	return taken
}

// holdOne arms every worker but the victim to hold at its before-write
// point on the victim's key, and disarms the others as soon as one is held:
// one taker held back is the interleaving sought, and the rest of the
// workers run on.
func (r *run) holdOne(ctx context.Context, v *proc, at event) {
	procs := r.fleet.all() // the crash fault adds to the fleet meanwhile
	for _, p := range procs {
		if p != v {
			p.command(command{Cmd: cmdArm, Arm: &arm{Mode: modeHold, Key: at.Key}})
		}
	}
	go func() {
		var held []int
		if !r.mon.wait(ctx, r.takeoverBound()+r.prot.Lease+r.margin(), func() bool {
			held = r.mon.heldLocked(v.client, at.Key, at.T)
			return len(held) > 0
		}) {
			return // finish clears them all
		}
		for _, p := range procs {
			if p != v && !slices.Contains(held, p.client) {
				p.command(command{Cmd: cmdDisarm})
			}
		}
	}()
}

// finish waits until the victim's operation has completed, then lets the
// workers held behind it go on.
func (r *run) finish(ctx context.Context, v *proc, at event, taken bool, f Fault) {
	if at.Op != "" {
		r.mon.wait(ctx, r.params.OpTimeout+10*time.Second, func() bool { return r.mon.completedLocked(at.Op) || v.exited() })
	}
	for _, p := range r.fleet.all() {
		if p != v {
			p.command(command{Cmd: cmdClear})
		}
	}
	if !taken && ctx.Err() == nil {
		r.log.note("%s of worker %d on key %s: no other worker took the key over within %v past the lease", f, v.client, at.Key, r.takeoverBound())
	}
}

// Sleep waits d, or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// poll checks cond every few milliseconds, for at most d: for conditions
// that nothing announces (a proxy's counters).
func poll(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || !Sleep(ctx, 2*time.Millisecond) {
			return cond()
		}
	}
	return true
}
