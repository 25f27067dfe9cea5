package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/renew"
)

// KeepaliveConfig configures the renewal of a lease while work runs (Keep,
// Locker). A nil *KeepaliveConfig means the defaults; Validate says whether
// another one can keep a lease of a given TTL.
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

func (c *KeepaliveConfig) withDefaults(ttl time.Duration) KeepaliveConfig {
	var d KeepaliveConfig
	if c != nil {
		d = *c
	}
	if d.Interval == 0 {
		d.Interval = ttl / 3
	}
	switch {
	case d.NoRenew:
		d.MaxRenewals = 0
	case d.MaxRenewals == 0:
		d.MaxRenewals = 100
	}
	if d.Margin == 0 {
		d.Margin = ttl / 5
	}
	return d
}

// WithDefaults returns c with the defaults for a lease of ttl filled in, as
// Keep and Locker use it; a nil c gives the defaults. Other holders of
// leases in lockfree (idempotency's leased attempts) renew on the same
// schedule.
func (c *KeepaliveConfig) WithDefaults(ttl time.Duration) KeepaliveConfig { return c.withDefaults(ttl) }

// schedule is the renewal loop that keeps a lease of ttl with c (defaults
// filled in).
func (c KeepaliveConfig) schedule(ttl time.Duration) renew.Config {
	return renew.Config{TTL: ttl, Interval: c.Interval, Margin: c.Margin, MaxRenewals: c.MaxRenewals,
		Expiring: ErrExpiring, Exhausted: ErrMaxRenewals}
}

// Validate reports whether c can keep a lease of ttl alive: negative
// durations, a Margin not below ttl, and an Interval (unless NoRenew) not
// below ttl − Margin, which would never renew in time, give an error matching
// ErrInvalid. Keep and NewLocker call it; call it yourself to refuse a
// configuration before acquiring a lock.
func (c KeepaliveConfig) Validate(ttl time.Duration) error {
	if err := validTTL(ttl); err != nil {
		return err
	}
	if c.Interval < 0 || c.Margin < 0 {
		return fmt.Errorf("%w: keepalive interval %v and margin %v must not be negative", ErrInvalid, c.Interval, c.Margin)
	}
	if err := c.withDefaults(ttl).schedule(ttl).Validate(); err != nil {
		return fmt.Errorf("%w: keepalive: %w", ErrInvalid, err)
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
	store Store
	loop  *renew.Loop
	tel   *lockerTelemetry // nil when started by Keep

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
	return keep(ctx, store, lease, cfg, nil)
}

// keep is Keep, counting renewals on tel when it is not nil.
func keep(ctx context.Context, store Store, lease Lease, cfg *KeepaliveConfig, tel *lockerTelemetry) (*Keepalive, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if err := validLease(lease); err != nil {
		return nil, err
	}
	c := cfg.withDefaults(lease.TTL)
	if err := c.Validate(lease.TTL); err != nil {
		return nil, err
	}
	k := &Keepalive{store: store, lease: lease, tel: tel}
	k.loop = renew.Start(ctx, c.schedule(lease.TTL), lease.sent, k.renew)
	return k, nil
}

func (k *Keepalive) renew(ctx context.Context) error {
	renewed, err := k.store.Renew(ctx, k.Lease())
	if k.tel != nil {
		k.tel.renewal(ctx, err)
	}
	if errors.Is(err, ErrNotHeld) {
		return renew.Lost(ErrLost)
	}
	if err != nil {
		return err
	}
	k.mu.Lock()
	k.lease = renewed
	k.mu.Unlock()
	return nil
}

// Context returns a context that is cancelled when the lease can no longer
// be trusted; context.Cause tells why.
func (k *Keepalive) Context() context.Context { return k.loop.Context() }

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
func (k *Keepalive) HeldSafely() bool { return k.loop.HeldSafely() }

// Stop stops renewing and cancels the context with ErrStopped, without
// releasing the lease (it expires on its own). It waits for the renewal
// goroutine to exit.
func (k *Keepalive) Stop() { k.loop.Stop(ErrStopped) }

// Release stops renewing and releases the lease.
func (k *Keepalive) Release(ctx context.Context) error {
	k.Stop()
	return k.store.Release(ctx, k.Lease())
}

// Done is closed when the renewal goroutine has exited.
func (k *Keepalive) Done() <-chan struct{} { return k.loop.Done() }
