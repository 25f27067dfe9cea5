package engine

import (
	"context"
	"math"
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
func (r *run) margin() time.Duration { return leaseMargin(r.prot.Lease) }

// leaseMargin is the margin past a lease of lease (run.margin).
func leaseMargin(lease time.Duration) time.Duration { return max(100*time.Millisecond, lease/2) }

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
// lease: past it, the fault is not taken over (takeover).
func (r *run) takeoverBound() time.Duration { return 5*time.Second + r.prot.Lease }

// blind returns the prefixes of the keys at which a fault a stale write
// lands under (pause, delay) stops or cuts off no worker: the scenario's
// StaleBlind keys.
func (r *run) blind() []string {
	if b, ok := r.sc.(StaleBlind); ok {
		return b.BlindKeys()
	}
	return nil
}

// armPoint arms v with a and waits until it fires; false (and a note) when
// v reaches no before-write point in time. A fault that stops a worker at
// an operation's point (pointArmed) fires at an in-transaction point
// instead when ctx or the run says so (armedAt).
func (r *run) armPoint(ctx context.Context, f Fault, v *proc, a arm) (event, bool) {
	if a.Point == "" {
		a.At = r.armedAt(ctx, f)
	}
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
		kind := AtBeforeWrite
		switch {
		case a.Point != "":
			kind = a.Point
		case a.At != "":
			kind = a.At
		}
		r.log.note("%s: worker %d reached no %s point within %v", f, v.client, kind, r.reachBound())
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

// taking is what became of the takeover of a fault's victim: whether
// another worker came for its key once its lease had run out, and whether
// it took the key over.
type taking int

const (
	// noTaker: no other worker began an operation on the key.
	noTaker taking = iota
	// keptOut: another worker began one and did not take the key over —
	// the approach kept it waiting or refused it (a payment's claim held
	// in the stopped worker's open transaction; a lease its keepalive
	// renews).
	keptOut
	// takenOver: another worker took the key over.
	takenOver
)

// takeover waits until the victim's lease has run out (since its point,
// at), sends another worker to its key unless one has taken it over
// already (the taker: it does not wait on chance for a worker to pick the
// key), and waits until a worker other than the victim has taken the key
// over — held, if it can be, at its own before-write point, so that the
// victim's stale write lands between the other's read and write. It
// reports what became of the key within the bound (takeoverBound); a
// worker seen waiting on a lock the victim's open transaction holds
// (blockedBy) ends the wait: it is kept out until the victim goes on. A
// victim whose operation goes on by itself (a stall: ends, when set) is
// taken over only by what another worker did before that operation
// completed: once it has, the key is its holder's to give, not to lose.
func (r *run) takeover(ctx context.Context, v *proc, at event, ends bool) taking {
	if at.Key != "" {
		r.holdOne(ctx, v, at)
	}
	until := func() history.Time {
		if ends && at.Op != "" {
			return r.mon.completedAtLocked(at.Op)
		}
		return math.MaxInt64
	}
	taken := func() bool { return r.mon.takenOverBeforeLocked(v.client, at.Key, at.Token, at.T, until()) }
	over := func() bool { return taken() || until() != math.MaxInt64 }
	expiry := time.Duration(at.T-history.Now()) + r.prot.Lease + r.margin()
	if Sleep(ctx, expiry) && at.Key != "" && !r.mon.wait(ctx, 0, over) {
		r.direct(v, at.Key)
	}
	ok, blocked := r.waitUnblocked(ctx, r.takeoverBound(), v, over)
	if ok && r.mon.wait(ctx, 0, taken) {
		// The taker may be on its way to its point (it has the lease, its
		// read is under way): held there, it makes the interleaving that
		// shows a missing fence — the stale write between its read and
		// its write. One that waits on the victim's row locks cannot get
		// there before the victim goes on.
		_, _ = r.waitUnblocked(ctx, r.reachBound(), v, func() bool { return len(r.mon.heldLocked(v.client, at.Key, at.T)) > 0 })
		return takenOver
	}
	r.mon.mu.Lock()
	defer r.mon.mu.Unlock()
	switch {
	case taken():
		return takenOver // as the run ended
	case ctx.Err() != nil:
		return noTaker // the run ended before the bound: not kept out
	case blocked: // another worker waits on the victim's lock
		return keptOut
	case at.Key != "" && r.mon.cameLocked(v.client, at.Key, at.T):
		return keptOut
	}
	return noTaker
}

// direct sends the worker after v that completed an operation in the last
// second — or, when none did, the next one running — to key: its next
// operation is on key (Env.Directed).
func (r *run) direct(v *proc, key string) {
	procs := r.fleet.all() // the crash fault adds to the fleet meanwhile
	i := slices.Index(procs, v)
	since := history.Now() - history.Time(time.Second)
	var taker *proc
	for n := 1; n < len(procs); n++ {
		p := procs[(i+n)%len(procs)]
		if p.exited() {
			continue
		}
		if r.mon.active(p.client, since) {
			taker = p
			break
		}
		if taker == nil {
			taker = p
		}
	}
	if taker != nil {
		taker.command(command{Cmd: cmdDirect, Key: key})
	}
}

// countTaking counts fault f, injected into v at its point at, by what
// became of its takeover (t): once another worker came for the key — or,
// when the fault needs no taker (needsTaker false), in any case — and
// apart, those taken over (Result.TakenOver). It notes a fault not taken
// over.
func (r *run) countTaking(ctx context.Context, f Fault, v *proc, at event, t taking, needsTaker bool) {
	r.log.countTaking(f, t != noTaker || !needsTaker, t == takenOver)
	switch {
	case t == keptOut:
		r.log.note("%s of worker %d on key %s: another worker began an operation on the key and did not take it over", f, v.client, at.Key)
	case t == noTaker && ctx.Err() == nil:
		what := "counted"
		if needsTaker {
			what = "not counted"
		}
		r.log.note("%s of worker %d on key %s: no other worker began an operation on the key within %v past the lease; %s", f, v.client, at.Key, r.takeoverBound(), what)
	}
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

// Every calls fn every d until ctx ends, the first time d from now.
func Every(ctx context.Context, d time.Duration, fn func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn()
		}
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
