package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// LateRenewal holds a worker's lease renewal past the lease's expiry, with
// every other worker kept from taking the key meanwhile, and then sends it:
// the renewal of a lease that expired while no one took it over. The lock
// service must refuse it; one that revives the lease breaks its own rules,
// which the exclusivity check sees (history.Revivals).
const LateRenewal Fault = "late-renewal"

// The late-renewal fault, step by step (lateRenewalRun.inject):
//
//  1. the victim is held at its before-write point (modeWait), a lease in
//     hand, its keepalive renewing it in the background;
//  2. every other worker closes a gate on the victim's key (modeGate): an
//     acquire of it blocks before it is sent, until the gate lifts. Each
//     acknowledges (evGated); nothing is granted meanwhile, the victim's
//     lease being in force;
//  3. the victim's next renewal of the lease is held before it is sent
//     (modeRenew; evPoint with that mode);
//  4. the coordinator waits until the lease has certainly expired, by the
//     exclusivity check's own measure: its last grant's or renewal's
//     return, plus the TTL and the check's margin, plus the run's margin;
//  5. the held renewal is sent (modeDeliver), and the coordinator waits for
//     its answer (evAnswered): ErrNotHeld from a correct service;
//  6. the gates lift and the victim's operation goes on.
//
// The fault counts once the renewal was answered with no other worker
// granted the key before: the renewal reached the service after the lease's
// expiry with the lease free to revive.

// The modes of the late-renewal fault's arms (cmdLateRenewal).
const (
	// modeGate closes the worker's gate on arm.Key: its acquires of that
	// key block before they are sent, until modeLift.
	modeGate = "gate"
	// modeRenew holds the worker's renewals of the lease with arm.Token
	// before they are sent, until modeDeliver (or modeLift).
	modeRenew = "renew"
	// modeDeliver sends the held renewals.
	modeDeliver = "deliver"
	// modeLift lifts the gate and sends any renewal still held.
	modeLift = "lift"
)

// The late-renewal fault's command and events.
const (
	// cmdLateRenewal carries a late-renewal arm (command.Arm, its Mode one of
	// the modes above).
	cmdLateRenewal = "late-renewal"
	// evGated acknowledges a gate closed (Key).
	evGated = "gated"
	// evAnswered: a held renewal was sent, and its answer came (Msg: the
	// error, "" for a renewal made).
	evAnswered = "answered"
)

type lateRenewal struct{}

func (lateRenewal) Name() Fault { return LateRenewal }
func (lateRenewal) How() string {
	return "renewals held past their lease's expiry, the key kept from the others, then sent: a lease expired and free, which its service (the lock service, idempotency's store) must refuse to renew"
}
func (lateRenewal) counts() string {
	return "the held renewal was answered, and no other worker was granted the key before"
}
func (lateRenewal) start(r *run) injector { return lateRenewalRun{r} }
func (lateRenewal) agent(w *worker) agent { return &renewalAgent{out: w.out} }

// skip: only a lease whose claims and renewals go through the engine
// (Protection.LockService: Env.Locks, Env.Claiming and Renewal) has
// renewals the fault can hold. An approach that says why it has none
// (FaultSkipper) gives its own reason.
func (lateRenewal) skip(_ Scenario, def ApproachDef) string {
	if s, ok := def.(FaultSkipper); ok && s.SkipFault(LateRenewal) != "" {
		return ""
	}
	p := def.Protection(Params{LeaseTTL: time.Second})
	switch {
	case p.Lease == 0:
		return "no lease protects its clients: there is no renewal to hold"
	case !p.LockService:
		if _, ok := def.(KafkaUser); ok {
			return "the lease that protects it is its Kafka consumer group's session; late-renewal does not yet hold its entity locks' renewals"
		}
		return "its lease is neither the PostgreSQL lock service's nor idempotency's, whose renewals late-renewal holds"
	}
	return ""
}

// renewalAgent is a worker's part of the fault: its gate, and its hold of
// one lease's renewals.
type renewalAgent struct {
	out      *emitter
	mu       sync.Mutex
	gate     string        // the key whose acquires block; "" for none
	gateOpen chan struct{} // closed when the gate lifts
	token    int64         // the lease whose renewals are held; 0 for none
	held     bool          // a renewal of it was held (the point fired)
	deliver  chan struct{} // closed when the held renewals go
}

// command follows a cmdLateRenewal.
func (l *renewalAgent) command(c command) bool {
	if c.Cmd != cmdLateRenewal {
		return false
	}
	a := c.Arm
	if a == nil {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch a.Mode {
	case modeGate:
		if l.gateOpen == nil {
			l.gateOpen = make(chan struct{})
		}
		l.gate = a.Key
		_ = l.out.event(event{Ev: evGated, T: history.Now(), Key: a.Key})
	case modeRenew:
		l.token, l.held, l.deliver = a.Token, false, make(chan struct{})
	case modeDeliver, modeLift:
		if l.deliver != nil {
			close(l.deliver)
		}
		l.token, l.held, l.deliver = 0, false, nil
		if a.Mode == modeLift && l.gateOpen != nil {
			close(l.gateOpen)
			l.gate, l.gateOpen = "", nil
		}
	}
	return true
}

func (*renewalAgent) point(context.Context, string) bool { return false }

// clear: cmdClear leaves the gate and the hold as they are; modeLift ends
// them.
func (*renewalAgent) clear() {}

// acquiring blocks an acquire of the operation of ctx while the gate is
// closed on its key, until the gate lifts or ctx ends.
func (l *renewalAgent) acquiring(ctx context.Context) {
	op := opFrom(ctx)
	if op == nil {
		return
	}
	l.mu.Lock()
	open := l.gateOpen
	closed := open != nil && l.gate == op.key
	l.mu.Unlock()
	if !closed {
		return
	}
	t := time.NewTimer(maxBlock)
	defer t.Stop()
	select {
	case <-open:
	case <-ctx.Done():
	case <-t.C:
	}
}

// renewing holds a renewal of the lease (name, token) while the fault
// holds that lease's renewals, reporting the first one held (evPoint), and
// reports whether it held it: its answer is then reported too (renewed).
// It does not end with the caller's context: a held renewal is sent late,
// whoever still waits for it.
func (l *renewalAgent) renewing(key, name string, token int64) bool {
	l.mu.Lock()
	if l.deliver == nil || l.token != token {
		l.mu.Unlock()
		return false
	}
	deliver, first := l.deliver, !l.held
	l.held = true
	l.mu.Unlock()
	if first {
		_ = l.out.event(event{Ev: evPoint, T: history.Now(), Mode: modeRenew, Key: key, Name: name, Token: token})
	}
	t := time.NewTimer(maxBlock)
	defer t.Stop()
	select {
	case <-deliver:
	case <-t.C:
	}
	return true
}

// renewed reports the answer to a held renewal.
func (l *renewalAgent) renewed(key, name string, token int64, err error) {
	ev := event{Ev: evAnswered, T: history.Now(), Key: key, Name: name, Token: token}
	if err != nil {
		ev.Msg = err.Error()
	}
	_ = l.out.event(ev)
}

type lateRenewalRun struct{ r *run }

// inject injects the fault once into v (the steps above).
func (l lateRenewalRun) inject(ctx context.Context, v *proc) {
	r := l.r
	at, ok := r.armPoint(ctx, LateRenewal, v, arm{Mode: modeWait})
	if !ok {
		return
	}
	others := slices.DeleteFunc(r.fleet.all(), func(p *proc) bool { return p == v || p.exited() })
	lift := func() {
		for _, p := range r.fleet.all() {
			p.command(command{Cmd: cmdLateRenewal, Arm: &arm{Mode: modeLift}})
		}
	}
	if at.Token == 0 {
		v.command(command{Cmd: cmdClear})
		r.log.note("late-renewal: worker %d held no lease at its before-write point; not counted", v.client)
		r.finish(ctx, v, at, true, LateRenewal)
		return
	}
	effect, why := lateRenewalSteps(ctx, r, v, at, others)
	lift()
	v.command(command{Cmd: cmdClear})
	if effect {
		r.log.count(LateRenewal)
	} else if ctx.Err() == nil {
		r.log.note("late-renewal of worker %d on key %s: %s; not counted", v.client, at.Key, why)
	}
	r.finish(ctx, v, at, true, LateRenewal)
}

// lateRenewalSteps runs steps 2 to 5 on v, held at its point at, and
// reports whether the fault took effect, or why not.
func lateRenewalSteps(ctx context.Context, r *run, v *proc, at event, others []*proc) (bool, string) {
	t0 := history.Now()
	for _, p := range others {
		p.command(command{Cmd: cmdLateRenewal, Arm: &arm{Mode: modeGate, Key: at.Key}})
	}
	if !r.mon.wait(ctx, r.reachBound(), func() bool { return r.mon.gatedLocked(others, at.Key, t0) }) {
		return false, "the other workers did not all close their gate on the key"
	}
	v.command(command{Cmd: cmdLateRenewal, Arm: &arm{Mode: modeRenew, Token: at.Token}})
	var held event
	// A lease in force is renewed within its TTL; one that is not was
	// let go (idempotency.leased.before-write follows the attempt's
	// renewals), and no renewal is coming.
	bound := r.prot.Lease + r.margin() + time.Second
	if !r.mon.wait(ctx, bound, func() bool {
		var ok bool
		held, ok = r.mon.pointLocked(v.client, evPoint, modeRenew, t0)
		return ok
	}) {
		return false, fmt.Sprintf("its lease with token %d was not renewed within %v", at.Token, bound)
	}
	r.mon.mu.Lock()
	last, ok := r.mon.lastLeaseLocked(v.client, at.Token)
	r.mon.mu.Unlock()
	if !ok {
		return false, fmt.Sprintf("no grant of its lease with token %d was seen", at.Token)
	}
	// Expired by the exclusivity check's measure (leaseSpans: the last
	// return plus the TTL and tenureMargin), and the run's margin past it.
	expiry := last.T + history.Time(last.TTL) + tenureMargin(last.TTL) + history.Time(r.margin())
	if !Sleep(ctx, time.Duration(expiry-history.Now())) {
		return false, "the run ended"
	}
	if r.mon.takenOver(v.client, at) {
		return false, "another worker took the key over before the renewal was sent"
	}
	sent := history.Now()
	v.command(command{Cmd: cmdLateRenewal, Arm: &arm{Mode: modeDeliver}})
	var ans event
	if !r.mon.wait(ctx, WriteTimeout+time.Second, func() bool {
		var ok bool
		ans, ok = r.mon.answeredLocked(v.client, at.Token, sent)
		return ok
	}) {
		return false, "the held renewal was not answered"
	}
	if r.mon.takenOver(v.client, at) {
		// The gates are still closed: it was granted before the answer.
		return false, "another worker took the key over before the renewal was answered"
	}
	outcome := "refused: " + ans.Msg
	if ans.Msg == "" {
		outcome = "made"
	}
	r.log.span(v.client, report.SpanStall, held.T, ans.T, fmt.Sprintf("late-renewal on %s: token %d's renewal held past its expiry, then %s", at.Key, at.Token, outcome))
	return true, ""
}

// gatedLocked reports whether every one of ps acknowledged a gate on key
// since t (or exited).
func (m *monitor) gatedLocked(ps []*proc, key string, t history.Time) bool {
	for _, p := range ps {
		if p.exited() {
			continue
		}
		if !slices.ContainsFunc(m.points, func(s pointSeen) bool {
			return s.client == p.client && s.ev.Ev == evGated && s.ev.Key == key && s.ev.T >= t
		}) {
			return false
		}
	}
	return true
}

// lastLeaseLocked returns client's last grant or renewal of the lease with
// token.
func (m *monitor) lastLeaseLocked(client int, token int64) (event, bool) {
	evs := m.tenures[client]
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; e.Token == token && !e.Uncertain && (e.Ev == evLease || e.Ev == evRenew) {
			return e, true
		}
	}
	return event{}, false
}

// answeredLocked returns the answer client reported since t to a held
// renewal of the lease with token.
func (m *monitor) answeredLocked(client int, token int64, t history.Time) (event, bool) {
	for _, s := range m.points {
		if s.client == client && s.ev.Ev == evAnswered && s.ev.Token == token && s.ev.T >= t {
			return s.ev, true
		}
	}
	return event{}, false
}

// takenOver reports whether another client than victim took key over since
// at (takenOverLocked).
func (m *monitor) takenOver(victim int, at event) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.takenOverLocked(victim, at.Key, at.Token, at.T)
}
