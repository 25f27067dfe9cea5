package harness

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lockfree-go/lockfree/internal/faultproxy"
	"github.com/lockfree-go/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/internal/report"
)

// Fault is a fault injected while an approach runs; the names are part of
// the public JSON report.
type Fault = report.Fault

// The faults.
const (
	// Pause stops a worker with SIGSTOP at its next before-write point —
	// after its read, claim or acquire, before its write — and resumes it
	// with SIGCONT once the lease that protects the approach has run out
	// and another worker, sent to the key, has taken it over or been kept
	// out of it. A pause no other worker came for is not counted.
	Pause Fault = "pause"
	// Stall blocks the goroutine of a worker's operation at its
	// before-write point for longer than the lease, the rest of the
	// process running on (its keepalives too): a goroutine descheduled at
	// the worst instruction, deterministic.
	Stall Fault = "stall"
	// Isolate cuts a worker off at its before-write point — its proxy
	// holds every byte, its write included — past the lease until another
	// worker, sent to the key, has taken it over or been kept out of it,
	// then resets its connections: the write never lands. A cut no other
	// worker came for is not counted.
	Isolate Fault = "isolate"
	// Delay is Isolate that heals: the held bytes are delivered late, in
	// order, after another worker took the key over (or was kept out of
	// it) — the delayed packet.
	Delay Fault = "delay"
	// LostCommit loses the answer to a worker's COMMIT: its proxy forwards
	// the COMMIT, the server commits, and the worker's connection is reset
	// before the answer reaches it. The worker cannot tell whether its
	// transaction took effect; one that retries it must find it did. It
	// runs on the approaches whose workers commit transactions of their
	// own (committer).
	LostCommit Fault = "lost-commit"
	// Restart stops and starts the PostgreSQL server mid-run.
	Restart Fault = "restart"
	// Failover kills the lock service's primary mid-run, its standby held
	// from receiving WAL, and promotes the standby, while a client that
	// holds a lease whose WAL was lost is stopped at its before-write
	// point (failover.go).
	Failover Fault = "failover"
	// RestartFailed counts, in a report, the restarts that failed; it is
	// not a fault to ask for.
	RestartFailed Fault = "restart-failed"
)

// faultKind describes one fault the harness injects. A fault hits either one
// worker at a time at its before-write point (victim), or every worker at
// once (global: a restart, a failover).
type faultKind struct {
	name Fault
	// how says how it is injected, after a count ("3 SIGSTOPs …"): the
	// report's FaultHow.
	how string
	// network: the run gives each worker its own proxy.
	network bool
	// bites: a stale holder's write lands under it, so an approach without
	// a fence must show violations.
	bites bool
	// victim injects the fault once into worker v.
	victim func(ctx context.Context, r *run, v *proc)
	// global injects the fault until ctx ends.
	global func(ctx context.Context, r *run)
	// skip says why the fault cannot take effect in def's runs, or "";
	// nil: it can in every approach's.
	skip func(def ApproachDef) string
}

// faultKinds are the faults, in the order they are listed.
var faultKinds = []faultKind{
	{name: Pause, bites: true, victim: pauseOnce,
		how: "SIGSTOPs at a before-write point, each resumed past the lease that protects the approach, once another worker sent to the key had taken it over or been kept out of it"},
	{name: Stall, victim: stallOnce,
		how: "stalls of one goroutine at a before-write point past the lease (the rest of the process, its lease renewals too, running on), another worker sent to the key meanwhile"},
	{name: Isolate, network: true, victim: func(ctx context.Context, r *run, v *proc) { cutOnce(ctx, r, v, false) },
		how: "cuts of one worker's connections at a before-write point, held past the lease until another worker sent to the key had taken it over or been kept out of it, then reset (the write never lands)"},
	{name: Delay, network: true, bites: true, victim: func(ctx context.Context, r *run, v *proc) { cutOnce(ctx, r, v, true) },
		how: "cuts of one worker's connections at a before-write point, held past the lease until another worker sent to the key had taken it over or been kept out of it, then delivered late (the write lands after that)"},
	{name: LateRenewal, victim: lateRenewalOnce, skip: lateRenewalSkip,
		how: "renewals held past their lease's expiry, the other workers kept from the key meanwhile, then sent: the renewal of a lease expired and free, which the lock service must refuse"},
	{name: LostCommit, network: true, victim: lostCommitOnce, skip: lostCommitSkip,
		how: "COMMITs whose answer was lost: the worker's proxy forwarded the COMMIT, the server committed, and the worker's connection was reset before the answer came"},
	{name: Overtake, victim: overtakeOnce, skip: overtakeSkip,
		how: "SIGSTOPs of a consumer holding a fetched batch it had written nothing of, each resumed past its session and after the worker that got its partition applied an event sent after the stop"},
	{name: Crash, victim: crashOnce, skip: crashSkip, how: crashHow},
	{name: Restart, global: restartFault,
		how: "restarts of the PostgreSQL server mid-run"},
	{name: Failover, bites: true, global: failoverFault,
		how: "failovers of the lock service's database mid-run (its standby held from WAL while leases were granted, the primary killed, the standby promoted), a client stopped across each holding a lease whose WAL was lost, resumed after another took its key over on the promoted node"},
	{name: LateHeartbeat, victim: lateHeartbeatOnce, skip: memberSkip,
		how: "holds of a partition member's heartbeats and steps past its lease, until another member claimed one of its partitions, while its calls went on"},
	{name: HandoffPause, victim: handoffPauseOnce, skip: memberSkip,
		how: "SIGSTOPs of a partition member in a handoff, after its drain and before its release, resumed once its lease had run out and other members had claimed every partition it held"},
}

func faultByName(f Fault) (faultKind, bool) {
	for _, k := range faultKinds {
		if k.name == f {
			return k, true
		}
	}
	return faultKind{}, false
}

// FaultNames lists the faults the harness injects.
func FaultNames() []Fault {
	out := make([]Fault, len(faultKinds))
	for i, k := range faultKinds {
		out[i] = k.name
	}
	return out
}

// Bites reports whether a stale holder's write lands under f, so that an
// approach with no fence must show violations under it: an isolation that
// ends in a reset drops the stale write, a stall leaves a renewing process
// its lease, a restart ends every session.
func Bites(f Fault) bool {
	k, _ := faultByName(f)
	return k.bites
}

// FaultSkip says why f cannot take effect in def's runs (the harness skips
// the approach under it), or "" when it can.
func FaultSkip(f Fault, def ApproachDef) string {
	if k, ok := faultByName(f); ok && k.skip != nil {
		return k.skip(def)
	}
	return ""
}

// ParseFaults parses "none" or a comma-separated list of faults.
func ParseFaults(s string) ([]Fault, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []Fault
	for _, f := range strings.Split(s, ",") {
		f := Fault(strings.TrimSpace(f))
		if _, ok := faultByName(f); !ok {
			var names []string
			for _, n := range FaultNames() {
				names = append(names, string(n))
			}
			return nil, fmt.Errorf("%w: unknown fault %q (want none, or some of %s)", ErrInvalid, f, strings.Join(names, ", "))
		}
		out = append(out, f)
	}
	return out, nil
}

const sigCont = syscall.SIGCONT

// inject runs the run's faults until ctx ends: the global ones each on its
// own, the victim ones in turn, one at a time, round-robin over the workers.
func (r *run) inject(ctx context.Context) {
	var victims []faultKind
	var wg sync.WaitGroup
	for _, f := range r.cfg.Faults {
		k, _ := faultByName(f)
		if k.global != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k.global(ctx, r)
			}()
		}
		if k.victim != nil {
			victims = append(victims, k)
		}
	}
	for i, n := 0, 0; len(victims) > 0 && ctx.Err() == nil; n++ {
		v, active := r.victim(&i)
		r.mu.Lock()
		r.idle = !active
		r.mu.Unlock()
		if v == nil {
			sleep(ctx, 10*time.Millisecond)
			continue
		}
		victims[n%len(victims)].victim(ctx, r, v)
	}
	wg.Wait()
}

// victim picks the next worker to inject a fault into, round-robin from *i
// over the workers that are running and completed an operation in the last
// second — a worker with nothing to do (its partitions are another's)
// would never reach a before-write point — or over every running worker
// when none did.
func (r *run) victim(i *int) (*proc, bool) {
	since := history.Now() - history.Time(time.Second)
	var fallback *proc
	for range r.procs {
		p := r.procs[*i%len(r.procs)]
		*i++
		if p.exited() {
			continue
		}
		if r.mon.active(p.client, since) {
			return p, true
		}
		if fallback == nil {
			fallback = p
		}
	}
	return fallback, false
}

// blind returns the prefixes of the keys at which a fault a stale write
// lands under (pause, delay) stops or cuts off no worker: the scenario's
// StaleBlind keys.
func (r *run) blind() []string {
	if b, ok := r.sc.(StaleBlind); ok {
		return b.BlindKeys()
	}
	return nil
}

// margin is how long past a lease the harness waits before it counts the
// lease as expired: the server's clock started it a little after the point
// the worker stopped at, and a waiter polls.
func (r *run) margin() time.Duration { return max(100*time.Millisecond, r.prot.Lease/2) }

// reachBound bounds the wait for an armed worker to reach a before-write
// point: one operation, plus a lock wait; a second for an idle one.
func (r *run) reachBound() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idle {
		// A worker that has been doing nothing may go on doing nothing:
		// another may have become busy meanwhile.
		return time.Second
	}
	return 2*r.params.OpTimeout + time.Second
}

// takeoverBound bounds the wait for another worker to take over, after the
// lease: past it, the fault is not taken over (takeover).
func (r *run) takeoverBound() time.Duration { return 5*time.Second + r.prot.Lease }

// armPoint arms v with mode and waits until it fires; false (and a note)
// when v reaches no before-write point in time.
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
		r.note("%s: worker %d reached no before-write point within %v", f, v.client, r.reachBound())
	}
	return event{}, false
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
// reports what became of the key within the bound (takeoverBound). A
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
	if sleep(ctx, expiry) && at.Key != "" && !r.mon.wait(ctx, 0, over) {
		r.direct(v, at.Key)
	}
	if r.mon.wait(ctx, r.takeoverBound(), over) && r.mon.wait(ctx, 0, taken) {
		// The taker may be on its way to its point (it has the lease, its
		// read is under way): held there, it makes the interleaving that
		// shows a missing fence — the stale write between its read and
		// its write.
		r.mon.wait(ctx, r.reachBound(), func() bool { return len(r.mon.heldLocked(v.client, at.Key, at.T)) > 0 })
		return takenOver
	}
	r.mon.mu.Lock()
	defer r.mon.mu.Unlock()
	switch {
	case taken():
		return takenOver // as the run ended
	case ctx.Err() != nil:
		return noTaker // the run ended before the bound: not kept out
	case at.Key != "" && r.mon.cameLocked(v.client, at.Key, at.T):
		return keptOut
	}
	return noTaker
}

// direct sends the worker after v that completed an operation in the last
// second — or, when none did, the next one running — to key: its next
// operation is on key (Env.directed).
func (r *run) direct(v *proc, key string) {
	procs := r.procs // the crash fault adds to r.procs meanwhile
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

// countTaking counts fault f, injected into v at its point at, by what became of
// its takeover (t): once another worker came for the key — or, when the
// fault needs no taker (needsTaker false), in any case — and apart, those
// taken over (Result.TakenOver). It notes a fault not taken over.
func (r *run) countTaking(ctx context.Context, f Fault, v *proc, at event, t taking, needsTaker bool) {
	r.mu.Lock()
	if t != noTaker || !needsTaker {
		r.injected[f]++
		r.takenOver[f] += 0
	}
	if t == takenOver {
		r.takenOver[f]++
	}
	r.mu.Unlock()
	switch {
	case t == keptOut:
		r.note("%s of worker %d on key %s: another worker began an operation on the key and did not take it over", f, v.client, at.Key)
	case t == noTaker && ctx.Err() == nil:
		what := "counted"
		if needsTaker {
			what = "not counted"
		}
		r.note("%s of worker %d on key %s: no other worker began an operation on the key within %v past the lease; %s", f, v.client, at.Key, r.takeoverBound(), what)
	}
}

// holdOne arms every worker but the victim to hold at its before-write
// point on the victim's key, and disarms the others as soon as one is held:
// one taker held back is the interleaving sought, and the rest of the
// workers run on.
func (r *run) holdOne(ctx context.Context, v *proc, at event) {
	procs := r.procs // the crash fault adds to r.procs meanwhile
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
	for _, p := range r.procs {
		if p != v {
			p.command(command{Cmd: cmdClear})
		}
	}
	if !taken && ctx.Err() == nil {
		r.note("%s of worker %d on key %s: no other worker took the key over within %v past the lease", f, v.client, at.Key, r.takeoverBound())
	}
}

// pauseOnce stops v at its next before-write point with SIGSTOP, counts the
// pause once the process is seen stopped, and resumes it past the lease and
// a takeover.
func pauseOnce(ctx context.Context, r *run, v *proc) {
	at, ok := r.armPoint(ctx, Pause, v, arm{Mode: modeStop, Skip: r.blind()})
	if !ok {
		return
	}
	// Nothing announces a stop: the kernel's view of the process is
	// polled.
	stopped := poll(ctx, 5*time.Second, func() bool { s, err := v.stopped(); return s || err != nil })
	if s, _ := v.stopped(); !stopped || !s {
		_ = v.signal(sigCont)
		if ctx.Err() == nil {
			r.note("pause: worker %d was not seen stopped after its SIGSTOP; not counted", v.client)
		}
		r.finish(ctx, v, at, true, Pause)
		return
	}
	t := r.takeover(ctx, v, at, false)
	_ = v.signal(sigCont)
	r.span(v.client, report.SpanPause, at.T, history.Now(), fmt.Sprintf("SIGSTOP on %s", at.Key))
	r.finish(ctx, v, at, true, Pause)
	r.countTaking(ctx, Pause, v, at, t, true)
}

// stallOnce stalls v's operation at its next before-write point for twice
// the lease and a margin.
func stallOnce(ctx context.Context, r *run, v *proc) {
	d := 2*r.prot.Lease + r.margin()
	at, ok := r.armPoint(ctx, Stall, v, arm{Mode: modeStall, For: d})
	if !ok {
		return
	}
	t := r.takeover(ctx, v, at, true)
	r.finish(ctx, v, at, true, Stall)
	r.countTaking(ctx, Stall, v, at, t, false)
	r.span(v.client, report.SpanStall, at.T, at.T+history.Time(d), fmt.Sprintf("stall on %s", at.Key))
}

// cutOnce holds v's traffic from its next before-write point on, past the
// lease and a takeover, then delivers it (late) or resets it. It counts the
// cut only when the proxy held bytes.
func cutOnce(ctx context.Context, r *run, v *proc, deliver bool) {
	f := map[bool]Fault{false: Isolate, true: Delay}[deliver]
	a := arm{Mode: modeWait}
	if deliver {
		a.Skip = r.blind()
	}
	at, ok := r.armPoint(ctx, f, v, a)
	if !ok {
		return
	}
	before := v.held()
	v.cut(faultproxy.Hold, false)
	from := history.Now()
	v.command(command{Cmd: cmdClear}) // the write goes into the cut
	held := func() int64 { return v.held() - before }
	caught := poll(ctx, 2*time.Second, func() bool { return held() > 0 })
	t := r.takeover(ctx, v, at, false)
	n := held()
	r.noteCut(v.client, from, history.Now())
	v.cut(faultproxy.Pass, deliver)
	end := history.Now()
	if caught && n > 0 {
		r.span(v.client, report.SpanIsolate, at.T, end, fmt.Sprintf("%s on %s: %d bytes held", f, at.Key, n))
	}
	r.finish(ctx, v, at, true, f)
	switch {
	case caught && n > 0:
		r.countTaking(ctx, f, v, at, t, true)
	case ctx.Err() == nil:
		r.note("%s: worker %d sent nothing into the cut; not counted", f, v.client)
	}
}

// committer is an approach whose workers write in transactions of their own,
// each ending in a COMMIT the lost-commit fault can take the answer of.
type committer interface{ commitsTransactions() }

func lostCommitSkip(def ApproachDef) string {
	if _, ok := def.(committer); ok {
		return ""
	}
	return "its workers commit no transaction of their own for lost-commit to take the answer of"
}

// lostCommitOnce loses the answer to v's next COMMIT, and counts it once its
// proxy lost one: the server committed, and v's connection was reset before
// the answer came. It then leaves v a margin to find out what happened.
func lostCommitOnce(ctx context.Context, r *run, v *proc) {
	before := v.proxy.Stats().LostReplies
	lost := func() bool { return v.proxy.Stats().LostReplies > before }
	from := history.Now()
	v.proxy.LoseReply(faultproxy.PostgresCommit)
	if !poll(ctx, r.reachBound(), lost) {
		v.proxy.LoseReply(nil)
		// It may have matched a COMMIT as it was disarmed: that COMMIT's
		// answer is on its way, and is lost.
		if !poll(ctx, time.Second, lost) {
			if ctx.Err() == nil {
				r.note("lost-commit: worker %d committed no transaction within %v; not counted", v.client, r.reachBound())
			}
			return
		}
	}
	r.count(LostCommit)
	r.span(v.client, report.SpanIsolate, from, history.Now(), "lost-commit: a COMMIT went through, its answer was lost")
	sleep(ctx, r.margin())
}

// restartFault restarts the server once, a third of the way into the run.
func restartFault(ctx context.Context, r *run) {
	if r.infra.Restart == nil {
		r.note("restart: this server cannot be restarted from here (use the embedded server or --restart-cmd)")
		return
	}
	if !sleep(ctx, r.cfg.Duration/3) {
		return
	}
	from := history.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	err := r.infra.Restart(rctx)
	cancel()
	if err != nil {
		r.count(RestartFailed)
		r.note("restart failed: %v", err)
		return
	}
	r.count(Restart)
	r.span(-1, report.SpanRestart, from, history.Now(), "PostgreSQL restart")
}

// sleep waits d, or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
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
		if time.Now().After(deadline) || !sleep(ctx, 2*time.Millisecond) {
			return cond()
		}
	}
	return true
}
