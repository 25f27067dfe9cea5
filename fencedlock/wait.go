package fencedlock

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Wakeups tells waiters that a lock was released, so they need not wait for
// their next poll. Memory implements it, and so does a Postgres Listener.
type Wakeups interface {
	// Released returns a channel closed at the next release of name, and a
	// function to call when the caller stops waiting.
	Released(name string) (<-chan struct{}, func())
}

// WaitConfig configures AcquireWait. The zero value is valid.
type WaitConfig struct {
	// MinDelay is the first backoff delay. Defaults to 10ms.
	MinDelay time.Duration
	// MaxDelay caps the backoff delay. Defaults to 1s.
	MaxDelay time.Duration
	// Jitter spreads each delay uniformly over ±Jitter of itself, so that
	// waiters released together do not retry together. Defaults to 0.5;
	// must be in [0, 1].
	Jitter float64
	// Wakeups, when set, ends a delay early when the lock is released.
	// Defaults to none (polling only).
	Wakeups Wakeups
}

// AcquireWait acquires name, waiting while another holder has it: it retries
// with exponential backoff and jitter, woken early by cfg.Wakeups, until it
// succeeds or ctx ends (it then returns ctx's cause, joined with the last
// *HeldError). Errors other than contention are returned at once.
func AcquireWait(ctx context.Context, store Store, name, holder string, ttl time.Duration, cfg *WaitConfig) (Lease, error) {
	var c WaitConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MinDelay <= 0 {
		c.MinDelay = 10 * time.Millisecond
	}
	if c.MaxDelay < c.MinDelay {
		c.MaxDelay = max(time.Second, c.MinDelay)
	}
	if c.Jitter == 0 {
		c.Jitter = 0.5
	}
	if c.Jitter < 0 || c.Jitter > 1 {
		return Lease{}, errors.Join(ErrInvalid, errors.New("fencedlock: jitter outside [0, 1]"))
	}
	delay := c.MinDelay
	var held error // the last contention seen, reported with ctx's end
	for {
		var wake <-chan struct{}
		stop := func() {}
		if c.Wakeups != nil {
			// Subscribe before trying, so a release in between is not missed.
			wake, stop = c.Wakeups.Released(name)
		}
		lease, err := store.Acquire(ctx, name, holder, ttl)
		if err != nil && held != nil && ctx.Err() != nil {
			// ctx ended during an attempt: report it as the end of the wait.
			stop()
			return Lease{}, errors.Join(context.Cause(ctx), held)
		}
		if !errors.Is(err, ErrHeld) {
			stop()
			return lease, err
		}
		held = err
		d := time.Duration(float64(delay) * (1 + c.Jitter*(2*rand.Float64()-1)))
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			stop()
			return Lease{}, errors.Join(context.Cause(ctx), err)
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
		stop()
		delay = min(delay*2, c.MaxDelay)
	}
}
