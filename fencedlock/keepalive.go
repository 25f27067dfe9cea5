package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// KeepaliveConfig configures Keep. The zero value is valid; Validate says
// whether another one is.
type KeepaliveConfig struct {
	// Interval between renewals; it must be below TTL − Margin, or the
	// lease would reach its margin before the first renewal. Defaults to
	// TTL/3.
	Interval time.Duration
	// MaxRenewals bounds how often the lease is renewed, so that a holder
	// stuck in its critical section cannot keep the lock forever; after the
	// last renewal the context is cancelled (ErrMaxRenewals) when the lease
	// reaches its safety margin. Negative means no bound. Defaults to 100.
	MaxRenewals int
	// NoRenew turns renewal off: the context is cancelled (ErrMaxRenewals)
	// when the lease reaches its safety margin, a deadline for work that
	// must fit in one lease. Defaults to false.
	NoRenew bool
	// Margin is how long before the lease's expiry (measured on the local
	// monotonic clock from the moment the granting request was sent) the
	// lease stops being held safely and the context is cancelled. It covers
	// clock-rate drift and the time work needs to notice the cancellation.
	// It must be below TTL. Defaults to TTL/5.
	Margin time.Duration
}

func (c KeepaliveConfig) withDefaults(ttl time.Duration) KeepaliveConfig {
	if c.Interval == 0 {
		c.Interval = ttl / 3
	}
	switch {
	case c.NoRenew:
		c.MaxRenewals = 0
	case c.MaxRenewals == 0:
		c.MaxRenewals = 100
	}
	if c.Margin == 0 {
		c.Margin = ttl / 5
	}
	return c
}

// Validate reports whether c can keep a lease of ttl alive: negative
// durations, a Margin not below ttl, and an Interval (unless NoRenew) not
// below ttl − Margin, which would never renew in time, give an error matching
// ErrInvalid. Keep and Guard call it; call it yourself to refuse a
// configuration before acquiring a lock.
func (c KeepaliveConfig) Validate(ttl time.Duration) error {
	if err := validTTL(ttl); err != nil {
		return err
	}
	if c.Interval < 0 || c.Margin < 0 {
		return fmt.Errorf("%w: keepalive interval %v and margin %v must not be negative", ErrInvalid, c.Interval, c.Margin)
	}
	d := c.withDefaults(ttl)
	if d.Margin >= ttl {
		return fmt.Errorf("%w: keepalive margin %v is not below ttl %v", ErrInvalid, d.Margin, ttl)
	}
	if !c.NoRenew && d.Interval >= ttl-d.Margin {
		return fmt.Errorf("%w: keepalive interval %v is not below ttl %v − margin %v: it would never renew in time",
			ErrInvalid, d.Interval, ttl, d.Margin)
	}
	return nil
}

// Keepalive renews a lease in the background and tells its owner, through a
// context, when the lease can no longer be trusted. Create it with Keep; its
// methods are safe for concurrent use.
//
// The context is cancelled — with a cause of ErrLost, ErrExpiring,
// ErrMaxRenewals or ErrStopped — before the server can grant the lock to
// anyone else, as long as this process runs: the deadline is TTL − Margin from
// when the last successful grant or renewal was sent, and the server's expiry
// is TTL from when it received that request. A paused process does not run
// its timers either, so the context is an early warning, not a guarantee:
// writes must still be fenced with the lease's token.
type Keepalive struct {
	store  Store
	cfg    KeepaliveConfig
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}

	mu    sync.Mutex
	lease Lease
}

// Keep starts renewing lease (obtained from store) until Stop, Release, the
// cancellation of ctx, or the loss of the lease. A nil cfg means defaults.
// The returned Keepalive's Context is derived from ctx. A nil store, a lease
// without name, holder, token or TTL (such as one from Store.Holder), or a cfg
// that fails Validate for lease.TTL give an error matching ErrInvalid and no
// Keepalive.
func Keep(ctx context.Context, store Store, lease Lease, cfg *KeepaliveConfig) (*Keepalive, error) {
	var c KeepaliveConfig
	if cfg != nil {
		c = *cfg
	}
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if err := validLease(lease); err != nil {
		return nil, err
	}
	if err := c.Validate(lease.TTL); err != nil {
		return nil, err
	}
	c = c.withDefaults(lease.TTL)
	kctx, cancel := context.WithCancelCause(ctx)
	k := &Keepalive{store: store, cfg: c, ctx: kctx, cancel: cancel, done: make(chan struct{}), lease: lease}
	go k.run()
	return k, nil
}

// Context returns a context that is cancelled when the lease can no longer
// be trusted; context.Cause tells why.
func (k *Keepalive) Context() context.Context { return k.ctx }

// Lease returns the lease as of its last successful renewal.
func (k *Keepalive) Lease() Lease {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.lease
}

// HeldSafely reports whether the lease is still within TTL − Margin of the
// moment its last grant or renewal was sent (local monotonic clock) and the
// keepalive has not given up. A true answer is a belief, not a guarantee: the
// process can pause right after asking.
func (k *Keepalive) HeldSafely() bool {
	if k.ctx.Err() != nil {
		return false
	}
	return time.Now().Before(k.Lease().SafeUntil(k.cfg.Margin))
}

// Stop stops renewing and cancels the context with ErrStopped, without
// releasing the lease (it expires on its own). It waits for the renewal
// goroutine to exit.
func (k *Keepalive) Stop() {
	k.cancel(ErrStopped)
	<-k.done
}

// Release stops renewing and releases the lease.
func (k *Keepalive) Release(ctx context.Context) error {
	k.Stop()
	return k.store.Release(ctx, k.Lease())
}

// Done is closed when the renewal goroutine has exited.
func (k *Keepalive) Done() <-chan struct{} { return k.done }

func (k *Keepalive) run() {
	defer close(k.done)
	renewals := 0
	for {
		lease := k.Lease()
		deadline := lease.SafeUntil(k.cfg.Margin)
		if lease.sent.IsZero() {
			// A lease without a local send time (not from Acquire): trust it
			// for one interval at most.
			deadline = time.Now().Add(k.cfg.Interval)
		}
		if k.cfg.MaxRenewals >= 0 && renewals >= k.cfg.MaxRenewals {
			k.waitUntil(deadline, ErrMaxRenewals)
			return
		}
		next := time.Now().Add(k.cfg.Interval)
		if next.After(deadline) {
			next = deadline
		}
		if !k.sleepUntil(next) {
			return
		}
		// Retry failed renewals until the deadline: a short outage need not
		// cost the lease.
		for {
			if !time.Now().Before(deadline) {
				k.cancel(ErrExpiring)
				return
			}
			rctx, cancel := context.WithDeadline(k.ctx, deadline)
			renewed, err := k.store.Renew(rctx, lease)
			cancel()
			if err == nil {
				k.mu.Lock()
				k.lease = renewed
				k.mu.Unlock()
				renewals++
				break
			}
			if errors.Is(err, ErrNotHeld) {
				k.cancel(ErrLost)
				return
			}
			if k.ctx.Err() != nil {
				return
			}
			retry := time.Now().Add(k.cfg.Interval / 4)
			if retry.After(deadline) {
				retry = deadline
			}
			if !k.sleepUntil(retry) {
				return
			}
		}
	}
}

// sleepUntil waits for t; false when the keepalive's context ended first.
func (k *Keepalive) sleepUntil(t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-k.ctx.Done():
		return false
	}
}

func (k *Keepalive) waitUntil(t time.Time, cause error) {
	if k.sleepUntil(t) {
		k.cancel(cause)
	}
}
