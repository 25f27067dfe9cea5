package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/lockfree-go/lockfree/cmd/lockfree/internal/history"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// WriteTimeout bounds a write sent after a fault: it is sent whatever the
// operation's deadline, so that a stale write reaches the fence that must
// refuse it.
const WriteTimeout = 5 * time.Second

// recordingLocks is the lock service of a worker: the store it wraps, with
// each lease it grants, renews and releases reported as an event, with the
// time its request was sent (the tenures of the timeline and of the
// exclusivity check, and the evidence of a takeover the fault injector
// waits for) and noted on the operation that asked for it. It keeps
// the store's wake-ups.
//
// A request whose answer never came (Uncertain: the service may have acted
// on it) is reported as uncertain: a grant with no token, which starts no
// tenure the check counts on; a renewal, which extends none; a release,
// which ends the tenure's certain span when it was sent. A grant or release
// whose answer was lost is sent again, with Env.Resend's backoff, as a
// client of a lock service does: the same holder's grant finds the lease
// its own (a *fencedlock.HeldError, which the caller waits out, as it
// waits for another holder's), a release finds it gone (ErrNotHeld). A
// renewal is its keepalive's to send again.
type recordingLocks struct {
	fencedlock.Store
	w *worker
}

var (
	_ fencedlock.ValueStore = recordingLocks{}
	_ fencedlock.Wakeups    = recordingLocks{}
)

// errNoValues is the answer of a value call on a lock service that keeps no
// values on its leases.
var errNoValues = errors.New("engine: the lock service keeps no values (fencedlock.ValueStore)")

func (r recordingLocks) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (fencedlock.Lease, error) {
	for _, h := range r.w.lockHooks() {
		h.acquiring(ctx) // a fault may keep the key from this worker
	}
	return r.grant(ctx, name, ttl, func() (fencedlock.Lease, error) { return r.Store.Acquire(ctx, name, holder, ttl) })
}

// grant sends a grant of name for ttl with send, again after a lost
// answer, and reports each grant made or maybe made.
func (r recordingLocks) grant(ctx context.Context, name string, ttl time.Duration, send func() (fencedlock.Lease, error)) (fencedlock.Lease, error) {
	var l fencedlock.Lease
	_, err := resend(ctx, resendMax, rand.Int64N, func() error {
		sent := history.Now()
		var err error
		l, err = send()
		switch {
		case err == nil:
			r.report(ctx, evLease, l, sent, false)
		case Uncertain(err):
			r.report(ctx, evLease, fencedlock.Lease{Name: name, TTL: ttl}, sent, true)
		}
		return err
	})
	return l, err
}

// Renew waits for the service's answer even after the caller stopped
// waiting (a renewal loop gives up at its lease's local deadline), and
// reports a renewal the service made then too: a renewal held by a fault
// and delivered late extends a lease all the same, and the exclusivity
// check must see it (renewal). The caller gets the answer only if it comes
// in time.
func (r recordingLocks) Renew(ctx context.Context, lease fencedlock.Lease) (fencedlock.Lease, error) {
	return renewal(ctx, r.w, lease.Name, lease.Token, func(rctx context.Context, sent history.Time) (fencedlock.Lease, error) {
		l, err := r.Store.Renew(rctx, lease)
		switch {
		case err == nil:
			r.report(ctx, evRenew, l, sent, false)
		case Uncertain(err):
			r.report(ctx, evRenew, lease, sent, true)
		}
		return l, err
	})
}

// AcquireValue is Acquire with a value on the lease (a leader election's
// grant), reported as Acquire's.
func (r recordingLocks) AcquireValue(ctx context.Context, name, holder string, ttl time.Duration, value string) (fencedlock.Lease, error) {
	vs, ok := r.Store.(fencedlock.ValueStore)
	if !ok {
		return fencedlock.Lease{}, errNoValues
	}
	for _, h := range r.w.lockHooks() {
		h.acquiring(ctx)
	}
	return r.grant(ctx, name, ttl, func() (fencedlock.Lease, error) { return vs.AcquireValue(ctx, name, holder, ttl, value) })
}

// SetValue changes a lease's value; it neither grants nor extends one, so
// there is nothing to report.
func (r recordingLocks) SetValue(ctx context.Context, lease fencedlock.Lease, value string) (fencedlock.Lease, error) {
	vs, ok := r.Store.(fencedlock.ValueStore)
	if !ok {
		return fencedlock.Lease{}, errNoValues
	}
	return vs.SetValue(ctx, lease, value)
}

func (r recordingLocks) Release(ctx context.Context, lease fencedlock.Lease) error {
	_, err := resend(ctx, resendMax, rand.Int64N, func() error {
		sent := history.Now()
		err := r.Store.Release(ctx, lease)
		if err == nil || Uncertain(err) {
			r.report(ctx, evRelease, lease, sent, err != nil)
		}
		return err
	})
	return err
}

// Released implements fencedlock.Wakeups with the wrapped store's, if any.
func (r recordingLocks) Released(name string) (<-chan struct{}, func()) {
	if w, ok := r.Store.(fencedlock.Wakeups); ok {
		return w.Released(name)
	}
	return nil, func() {}
}

// report reports ev of lease l, whose request was sent at sent, as
// uncertain when its answer never came.
func (r recordingLocks) report(ctx context.Context, ev string, l fencedlock.Lease, sent history.Time, uncertain bool) {
	e := event{Ev: ev, T: history.Now(), Sent: sent, Name: l.Name, Token: l.Token, TTL: l.TTL, Uncertain: uncertain}
	if op := opFrom(ctx); op != nil {
		e.Key, e.Op = op.key, op.ID()
		if ev == evLease && !uncertain {
			op.token.Store(l.Token)
		}
	}
	// The event is evidence for the fault injector and the timeline; a
	// worker whose output is gone is halted by its run loop.
	_ = r.w.out.event(e)
}

// Uncertain reports whether err, from a request to a lease service, leaves
// its outcome unknown: the request may have been sent and acted on, its
// answer lost (history.Classify's Unknown), rather than refused — held by
// another, not held, invalid — or never sent. A mechanism that reports
// its own leases (Env.Report) marks such a request's Evidence Uncertain.
func Uncertain(err error, refusals ...error) bool {
	refusals = append(refusals, fencedlock.ErrHeld, fencedlock.ErrNotHeld, fencedlock.ErrInvalid, errNoValues)
	return err != nil && history.Classify(err, refusals...) == history.Unknown
}
