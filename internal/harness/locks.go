package harness

import (
	"context"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/history"
)

// recordingLocks is the lock service of a worker: the store it wraps, with
// each lease it grants, renews and releases reported as an event (the
// tenures of the timeline, and the evidence of a takeover the fault
// injector waits for) and noted on the operation that asked for it. It keeps
// the store's wake-ups.
type recordingLocks struct {
	fencedlock.Store
	w *worker
}

var (
	_ fencedlock.Store   = recordingLocks{}
	_ fencedlock.Wakeups = recordingLocks{}
)

func (r recordingLocks) Acquire(ctx context.Context, name, holder string, ttl time.Duration) (fencedlock.Lease, error) {
	l, err := r.Store.Acquire(ctx, name, holder, ttl)
	if err == nil {
		r.report(ctx, evLease, l)
	}
	return l, err
}

func (r recordingLocks) Renew(ctx context.Context, lease fencedlock.Lease) (fencedlock.Lease, error) {
	l, err := r.Store.Renew(ctx, lease)
	if err == nil {
		r.report(ctx, evRenew, l)
	}
	return l, err
}

func (r recordingLocks) Release(ctx context.Context, lease fencedlock.Lease) error {
	err := r.Store.Release(ctx, lease)
	if err == nil {
		r.report(ctx, evRelease, lease)
	}
	return err
}

// Released implements fencedlock.Wakeups with the wrapped store's, if any.
func (r recordingLocks) Released(name string) (<-chan struct{}, func()) {
	if w, ok := r.Store.(fencedlock.Wakeups); ok {
		return w.Released(name)
	}
	return nil, func() {}
}

func (r recordingLocks) report(ctx context.Context, ev string, l fencedlock.Lease) {
	e := event{Ev: ev, T: history.Now(), Name: l.Name, Token: l.Token, TTL: l.TTL}
	if op := opFrom(ctx); op != nil {
		e.Key, e.Op = op.key, op.ID()
		if ev == evLease {
			op.token.Store(l.Token)
		}
	}
	// The event is evidence for the fault injector and the timeline; a
	// worker whose output is gone is halted by its run loop.
	_ = r.w.out.event(e)
}
