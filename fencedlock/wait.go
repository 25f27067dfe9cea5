package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Wakeups tells waiters that a lock was released, so they need not wait for
// their next poll. Memory implements it, and so does Postgres (with Notify,
// on a pool).
type Wakeups interface {
	// Released returns a channel closed at the next release of name, and a
	// function to call when the caller stops waiting. A nil channel means
	// no wake-up will come: the caller polls.
	Released(name string) (<-chan struct{}, func())
}

// WaitConfig configures the wait for a busy lock (AcquireWait,
// Locker.Do). A nil *WaitConfig means the defaults.
type WaitConfig struct {
	// MinDelay is the first backoff delay. Defaults to 10ms.
	MinDelay time.Duration
	// MaxDelay caps the backoff delay. Defaults to 1s, or MinDelay when
	// that is longer.
	MaxDelay time.Duration
	// Jitter spreads each delay uniformly over ±Jitter of itself, so that
	// waiters released together do not retry together; it must be in
	// [0, 1]. Defaults to 0.5.
	Jitter float64
	// Wakeups ends a delay early when the lock is released. Defaults to
	// the store's own when it implements Wakeups (Memory; Postgres with
	// Notify), else none (polling only).
	Wakeups Wakeups
}

func (c *WaitConfig) withDefaults(store Store) WaitConfig {
	var d WaitConfig
	if c != nil {
		d = *c
	}
	if d.MinDelay == 0 {
		d.MinDelay = 10 * time.Millisecond
	}
	if d.MaxDelay == 0 {
		d.MaxDelay = max(time.Second, d.MinDelay)
	}
	if d.Jitter == 0 {
		d.Jitter = 0.5
	}
	if d.Wakeups == nil {
		d.Wakeups, _ = store.(Wakeups)
	}
	return d
}

func (c WaitConfig) validate() error {
	switch {
	case c.MinDelay < 0 || c.MaxDelay < c.MinDelay:
		return fmt.Errorf("%w: wait delays %v to %v", ErrInvalid, c.MinDelay, c.MaxDelay)
	case c.Jitter < 0 || c.Jitter > 1:
		return fmt.Errorf("%w: wait jitter %v outside [0, 1]", ErrInvalid, c.Jitter)
	}
	return nil
}

// Validate reports a WaitConfig that AcquireWait would refuse: negative
// delays, MaxDelay below MinDelay, or Jitter outside [0, 1] give an error
// matching ErrInvalid. A nil c is the defaults, which are valid. Packages
// that wait on fencedlock (leader) call it in their constructors.
func (c *WaitConfig) Validate() error { return c.withDefaults(nil).validate() }

// AcquireWait acquires name, waiting while another holder has it: it retries
// with exponential backoff and jitter, woken early by the wake-ups (cfg's, or
// the store's), until it succeeds or ctx ends (it then returns ctx's cause,
// joined with the last *HeldError). Errors other than contention are returned
// at once; a bad cfg gives ErrInvalid before any attempt.
func AcquireWait(ctx context.Context, store Store, name, holder string, ttl time.Duration, cfg *WaitConfig) (Lease, error) {
	if store == nil {
		return Lease{}, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	c := cfg.withDefaults(store)
	if err := c.validate(); err != nil {
		return Lease{}, err
	}
	return c.acquire(ctx, name, func() (Lease, error) { return store.Acquire(ctx, name, holder, ttl) })
}

// AcquireValueWait is AcquireWait with value on the new lease: each attempt
// is store.AcquireValue, so the value is set in the step that grants the
// lease. A value longer than MaxValueLen is a *ValueTooLargeError before any
// attempt.
func AcquireValueWait(ctx context.Context, store ValueStore, name, holder string, ttl time.Duration, value string, cfg *WaitConfig) (Lease, error) {
	if store == nil {
		return Lease{}, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	if err := ValidValue(value); err != nil {
		return Lease{}, err
	}
	c := cfg.withDefaults(store)
	if err := c.validate(); err != nil {
		return Lease{}, err
	}
	return c.acquire(ctx, name, func() (Lease, error) { return store.AcquireValue(ctx, name, holder, ttl, value) })
}

// acquire waits for name, calling try for each attempt.
func (c WaitConfig) acquire(ctx context.Context, name string, try func() (Lease, error)) (Lease, error) {
	var lease Lease
	err := c.retry(ctx, name, func() (err error) { lease, err = try(); return err })
	if err != nil {
		return Lease{}, err
	}
	return lease, nil
}

// retry calls try until it is not refused with ErrHeld, or ctx ends. The
// wake-ups it listens to are those of the name the last refusal's
// *HeldError names (one of AcquireAll's), else of name.
func (c WaitConfig) retry(ctx context.Context, name string, try func() error) error {
	// The first attempt goes without wake-ups: most find the lock free, and
	// for a store that listens only while someone waits a subscription is a
	// LISTEN on a connection of its own.
	err := try()
	if !errors.Is(err, ErrHeld) {
		return err
	}
	// Refused: subscribe before each further attempt (the first at once),
	// so that a release in between is not missed, and subscribe the next
	// before dropping the last, so that a store that listens only while
	// someone waits keeps listening.
	wake, stop := c.subscribe(heldName(err, name))
	defer func() { stop() }()
	delay := c.MinDelay
	held := err // the last contention seen, reported with ctx's end
	for {
		err = try()
		if err != nil && ctx.Err() != nil {
			// ctx ended during an attempt: report it as the end of the wait.
			return errors.Join(context.Cause(ctx), held)
		}
		if !errors.Is(err, ErrHeld) {
			return err
		}
		held = err
		d := time.Duration(float64(delay) * (1 + c.Jitter*(2*rand.Float64()-1)))
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return errors.Join(context.Cause(ctx), err)
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
		next, nextStop := c.subscribe(heldName(err, name))
		stop()
		wake, stop = next, nextStop
		delay = min(delay*2, c.MaxDelay)
	}
}

// heldName is the name refusal says is held, or name when it says none.
func heldName(refusal error, name string) string {
	var h *HeldError
	if errors.As(refusal, &h) && h.Name != "" {
		return h.Name
	}
	return name
}

func (c WaitConfig) subscribe(name string) (<-chan struct{}, func()) {
	if c.Wakeups == nil {
		return nil, func() {}
	}
	return c.Wakeups.Released(name)
}
