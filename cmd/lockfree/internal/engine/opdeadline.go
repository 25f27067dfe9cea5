package engine

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// opDeadline bounds one operation; the time its process spends stopped at a
// before-write point (a pause, the failover's stop) is not spent from it.
//
// A real process can stop at any instruction, after its driver checked the
// operation's deadline too: its write then goes out whatever the deadline.
// The engine stops a worker at a before-write point, before the driver's
// check. Were that stop spent from the deadline, the deadline would refuse
// a stale write the fault let through: a fence that neither twin has, and
// a foil that bites only when the stop is short. Giving the stop back is
// stopping after the driver's check. The twins keep the code a careful
// engineer writes: every statement on the operation's context.
type opDeadline struct {
	d      time.Duration
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	at      time.Time // when the operation's time runs out
	stopped time.Time // when its process stopped; zero while it runs
	timer   *time.Timer
}

type opDeadlineKey struct{}

// withOpDeadline returns the context of an operation bounded by d, and its
// cancel function. Its Err is context.Canceled once d has run out, its
// Cause context.DeadlineExceeded.
func withOpDeadline(parent context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	o := &opDeadline{d: d, cancel: cancel, at: time.Now().Add(d)}
	o.mu.Lock()
	o.timer = time.AfterFunc(d, o.expire)
	o.mu.Unlock()
	return context.WithValue(ctx, opDeadlineKey{}, o), func() {
		o.mu.Lock()
		o.timer.Stop()
		o.mu.Unlock()
		cancel(context.Canceled)
	}
}

// expire ends the operation once its time has run out, stops excluded.
func (o *opDeadline) expire() {
	o.mu.Lock()
	if !o.stopped.IsZero() {
		o.mu.Unlock()
		return // resume sets the timer again
	}
	if left := time.Until(o.at); left > 0 {
		o.timer.Reset(left)
		o.mu.Unlock()
		return
	}
	o.mu.Unlock()
	o.cancel(fmt.Errorf("engine: operation timeout %v: %w", o.d, context.DeadlineExceeded))
}

// stopping marks ctx's operation as stopped from now on; resumed gives the
// time back. Both do nothing for a context with no opDeadline (background
// work).
func stopping(ctx context.Context) (resumed func()) {
	o, _ := ctx.Value(opDeadlineKey{}).(*opDeadline)
	if o == nil {
		return func() {}
	}
	o.mu.Lock()
	o.stopped = time.Now()
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.at = o.at.Add(time.Since(o.stopped))
		o.stopped = time.Time{}
		o.timer.Reset(time.Until(o.at))
	}
}
