package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/report"
)

// Overtake stops a stream consumer with SIGSTOP while it holds a batch of
// events it fetched and has written nothing of — its handler has taken no
// row lock — and resumes it with SIGCONT only once its session ran out,
// its partition moved, and the worker that got it applied an event sent
// after the stop: everything the stopped one holds is applied, and its
// key has moved past it. The stopped consumer then goes on with its batch:
// it must find it applied and skip it, not apply it again nor move the
// key's recorded progress back. A stopped batch whose transaction holds
// row locks another worker waits on (an inbox's deduplication runs before
// the handler) is ended after idleTimeout, as
// idle_in_transaction_session_timeout would. The pause fault instead holds
// the worker that took over at its own before-write point, so that a stale
// write lands between its read and its write; under it the taker's first
// batch is the stopped one's events, seldom more.
const Overtake Fault = "overtake"

type overtake struct{}

func (overtake) Name() Fault { return Overtake }
func (overtake) How() string {
	return "SIGSTOPs of a consumer holding a fetched batch it wrote nothing of, resumed past its session once another worker applied an event sent after the stop"
}
func (overtake) counts() string {
	return "another worker applied an event sent after the stop, and the stopped transaction ended"
}
func (overtake) start(r *run) injector { return overtakeRun{r} }

func (overtake) skip(_ Scenario, def ApproachDef) string {
	if _, ok := def.(Fetcher); ok {
		return ""
	}
	return "its workers hold no batch fetched from a stream for another worker to apply past"
}

type overtakeRun struct{ r *run }

// inject stops v at a before-write point of a task that holds fetched
// events, resumes it once the lease that protects the approach has run out
// and another worker applied an event of the key sent after the stop, and
// counts the fault once both happened and v's stopped transaction ended.
func (o overtakeRun) inject(ctx context.Context, v *proc) {
	r := o.r
	at, ok := armFetched(ctx, r, v)
	if !ok {
		return
	}
	if !stopped(ctx, v) {
		_ = v.signal(sigCont)
		if ctx.Err() == nil {
			r.log.note("overtake: worker %d was not seen stopped after its SIGSTOP; not counted", v.client)
		}
		r.finish(ctx, v, at, true, Overtake)
		return
	}
	// From here on the worker fetches nothing: an event produced by an
	// operation invoked later is past everything it holds. Another worker
	// applies one only once the stopped one's session ran out and its
	// partition moved: that is the condition waited for, within the lease
	// and the takeover's bound.
	since := history.Now()
	lease := r.prot.Lease
	if _, ok := r.def.(KafkaUser); ok {
		// A consumer's partition moves once the group's lease ran out,
		// whatever lease protects the approach's other work.
		lease = max(lease, KafkaGroupTiming(r.cfg.Clients).Lease())
	}
	bound := time.Duration(at.T-since) + lease + leaseMargin(lease) + r.takeoverBound()
	// A stopped batch that holds row locks (an inbox's deduplication
	// writes before the handler runs) is ended as the server would end an
	// idle transaction, so that the taker can apply past it.
	overtaken, n := r.waitEndingIdle(ctx, v, bound, func() bool {
		return r.mon.overtakenLocked(v.client, at.Key, since)
	})
	r.noteEnded(Overtake, v, "on "+at.Key+" holding fetched events", n)
	_ = v.signal(sigCont)
	r.log.span(v.client, report.SpanPause, at.T, history.Now(), fmt.Sprintf("SIGSTOP on %s holding fetched events", at.Key))
	r.finish(ctx, v, at, true, Overtake)
	switch {
	case overtaken:
		// Counted after the stopped transaction ended: a run that ends
		// with this fault lets its worker go on with its batch first.
		r.log.count(Overtake)
	case ctx.Err() == nil:
		r.log.note("overtake of worker %d on key %s: no other worker applied an event sent after the stop within %v past the lease; not counted", v.client, at.Key, r.takeoverBound())
	}
}

// fetchedBound bounds the wait for an armed worker to reach a point that
// holds fetched events: a consumer of another worker's entity starts a
// transaction every few milliseconds, and one that consumes none, or only
// its own, never reaches one.
const fetchedBound = 3 * time.Second

// armFetched arms v to stop at its next point that holds fetched events
// (on an Aimer that aims the overtake, its aim point), and waits until it
// fires; false when v reaches none in fetchedBound.
func armFetched(ctx context.Context, r *run, v *proc) (event, bool) {
	t0 := history.Now()
	a := arm{Mode: modeStop, Fetched: true}
	if d, ok := r.def.(Aimer); ok {
		a.Point = d.AimPoint(Overtake)
	}
	v.command(command{Cmd: cmdArm, Arm: &a})
	var pt event
	fired := func() bool {
		var ok bool
		pt, ok = r.mon.pointLocked(v.client, evPoint, modeStop, t0)
		return ok
	}
	if r.mon.wait(ctx, fetchedBound, fired) {
		return pt, true
	}
	v.command(command{Cmd: cmdClear})
	// It may have fired as it was cleared: its event is on its way.
	return pt, r.mon.wait(ctx, time.Second, fired)
}

// overtakenLocked reports whether another client than victim committed the
// application of an event of key produced by an operation invoked after t:
// an event sent after t, when the victim was stopped, is past every event
// it holds.
func (m *monitor) overtakenLocked(victim int, key string, t history.Time) bool {
	for _, a := range m.applied[key] {
		if a.client == victim {
			continue
		}
		o, ok := m.done[a.produced]
		if !ok {
			o, ok = m.open[a.produced]
		}
		if ok && o.call > t {
			return true
		}
	}
	return false
}
