// Package renew is lockfree's one lease-renewal loop: fencedlock's
// Keepalive, idempotency's leased attempts and partition's member heartbeats
// all keep their leases with it.
//
// A Loop renews a lease every Interval and cancels its context, with a cause,
// as soon as the lease can no longer be trusted: when a renewal reports the
// lease gone (Lost), when no renewal succeeded before the safety deadline, or
// after MaxRenewals renewals, at that deadline. The deadline is TTL − Margin
// after the moment the last successful grant or renewal request was *sent*,
// on the local monotonic clock: the server measured its TTL from a later
// moment (when it received the request), so the loop gives up before the
// server can grant the lease to anyone else — as long as this process runs.
// A paused process runs no timers, so the context is an early warning, never
// a guarantee: writes must still be fenced.
package renew

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Config is a renewal schedule. The zero value is not valid: callers fill
// in their own defaults and call Validate.
type Config struct {
	// TTL is the lease length the store grants on each renewal.
	TTL time.Duration
	// Interval is the time between renewals; it must be positive and below
	// TTL − Margin, or the deadline would come before the first renewal.
	Interval time.Duration
	// Margin is how long before the lease's expiry (measured from the send
	// time) the loop gives up; it must be positive and below TTL.
	Margin time.Duration
	// MaxRenewals bounds the renewals, so that a holder stuck in its work
	// cannot keep the lease forever: after the last one the context is
	// cancelled with Exhausted at the deadline. Negative means no bound;
	// 0 renews never (the context ends at the first deadline).
	MaxRenewals int
	// Expiring is the cause when no renewal succeeded before the deadline.
	Expiring error
	// Exhausted is the cause after MaxRenewals renewals.
	Exhausted error
}

// Validate reports a schedule that cannot keep a lease: a non-positive TTL
// or Margin, a Margin not below TTL, or (when it renews at all) an Interval
// not within (0, TTL − Margin). The error has no package prefix: callers
// wrap it with their own ErrInvalid.
func (c Config) Validate() error {
	switch {
	case c.TTL <= 0:
		return fmt.Errorf("TTL %v must be positive", c.TTL)
	case c.Margin <= 0 || c.Margin >= c.TTL:
		return fmt.Errorf("margin %v must be positive and below TTL %v", c.Margin, c.TTL)
	case c.MaxRenewals != 0 && (c.Interval <= 0 || c.Interval >= c.TTL-c.Margin):
		return fmt.Errorf("interval %v must be positive and below TTL %v − margin %v: it would never renew in time",
			c.Interval, c.TTL, c.Margin)
	}
	return nil
}

// Func renews the lease once. It returns nil when the lease was renewed, an
// error made with Lost when the lease is gone (the loop ends with that error
// as its cause), and any other error for a failure worth retrying until the
// deadline (a timeout, a lost connection).
type Func func(ctx context.Context) error

type lostError struct{ err error }

func (e lostError) Error() string { return e.err.Error() }
func (e lostError) Unwrap() error { return e.err }

// Lost marks err as final: the loop stops retrying and cancels its context
// with err as the cause.
func Lost(err error) error { return lostError{err} }

// ErrStopped is the cause of a Loop's context after Stop with a nil cause.
var ErrStopped = errors.New("renew: stopped")

// Loop renews one lease in the background. Create it with Start; its
// methods are safe for concurrent use.
type Loop struct {
	cfg    Config
	renew  Func
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu       sync.Mutex
	sent     time.Time // when the last successful grant or renewal was sent
	renewals int
}

// Start starts renewing a lease whose grant was requested at sent (local
// monotonic time; a zero sent trusts the lease for one Interval) until Stop,
// the end of ctx, or the loss of the lease. The Loop's Context is derived
// from ctx. cfg must be valid (Validate); Start panics otherwise, since the
// caller validated it before acquiring the lease.
func Start(ctx context.Context, cfg Config, sent time.Time, renew Func) *Loop {
	if err := cfg.Validate(); err != nil {
		panic("renew: " + err.Error())
	}
	if sent.IsZero() {
		// Not from a grant this process timed: trust it for one interval.
		sent = time.Now().Add(cfg.Interval - (cfg.TTL - cfg.Margin))
	}
	lctx, cancel := context.WithCancelCause(ctx)
	l := &Loop{cfg: cfg, renew: renew, ctx: lctx, cancel: cancel, done: make(chan struct{}), sent: sent}
	go l.run()
	return l
}

// Context is cancelled when the lease can no longer be trusted;
// context.Cause says why.
func (l *Loop) Context() context.Context { return l.ctx }

// SafeUntil returns the deadline: TTL − Margin after the last successful
// grant or renewal was sent.
func (l *Loop) SafeUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent.Add(l.cfg.TTL - l.cfg.Margin)
}

// HeldSafely reports whether the deadline is still ahead and the loop has
// not given up. A true answer is a belief: the process can pause right after.
func (l *Loop) HeldSafely() bool {
	return l.ctx.Err() == nil && time.Now().Before(l.SafeUntil())
}

// Renewals returns how many renewals succeeded.
func (l *Loop) Renewals() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.renewals
}

// Stop cancels the context with cause (ErrStopped when nil) unless it ended
// already, and waits for the renewal goroutine to exit.
func (l *Loop) Stop(cause error) {
	if cause == nil {
		cause = ErrStopped
	}
	l.cancel(cause)
	<-l.done
}

// Done is closed when the renewal goroutine has exited.
func (l *Loop) Done() <-chan struct{} { return l.done }

func (l *Loop) run() {
	defer close(l.done)
	for {
		deadline := l.SafeUntil()
		if l.cfg.MaxRenewals >= 0 && l.Renewals() >= l.cfg.MaxRenewals {
			if l.sleepUntil(deadline) {
				l.cancel(l.cfg.Exhausted)
			}
			return
		}
		if !l.sleepUntil(min2(time.Now().Add(l.cfg.Interval), deadline)) || !l.renewBy(deadline) {
			return
		}
	}
}

// renewBy renews, retrying failures until deadline: a short outage need not
// cost the lease. It returns false when the loop is over.
func (l *Loop) renewBy(deadline time.Time) bool {
	for {
		if !time.Now().Before(deadline) {
			l.cancel(l.cfg.Expiring)
			return false
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(l.ctx, deadline)
		err := l.renew(rctx)
		cancel()
		if err == nil {
			l.mu.Lock()
			l.sent = sent
			l.renewals++
			l.mu.Unlock()
			return true
		}
		if lost, ok := errors.AsType[lostError](err); ok {
			l.cancel(lost.err)
			return false
		}
		if l.ctx.Err() != nil || !l.sleepUntil(min2(time.Now().Add(l.cfg.Interval/4), deadline)) {
			return false
		}
	}
}

// sleepUntil waits for t; false when the loop's context ended first.
func (l *Loop) sleepUntil(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-l.ctx.Done():
		return false
	}
}

func min2(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
