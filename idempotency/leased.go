package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockfree-go/lockfree/internal/short"
)

// LeasedConfig configures a Leased executor. The zero value is valid; a
// negative duration is an error.
type LeasedConfig struct {
	// TTL is the lease of each attempt, between MinTTL and MaxTTL. Defaults
	// to 30s.
	TTL time.Duration
	// RenewInterval is the time between renewals; it must be shorter than
	// TTL - Margin, or no renewal would come before the attempt gives up.
	// Defaults to TTL/3, or half of TTL - Margin when that is shorter.
	RenewInterval time.Duration
	// Margin is how long before the lease ends — measured on the local
	// monotonic clock from the moment the granting request was sent — the
	// attempt's context is cancelled if no renewal succeeded, so that the
	// work hears of it before the store can let a retry take over. It must
	// be shorter than TTL. Defaults to TTL/5.
	Margin time.Duration
	// WriteTimeout bounds the completion or release after the work returns
	// (they run even when the caller's context has ended). Defaults to 5s.
	WriteTimeout time.Duration
}

func (c LeasedConfig) withDefaults() (LeasedConfig, error) {
	if c.TTL == 0 {
		c.TTL = 30 * time.Second
	}
	if c.Margin == 0 {
		c.Margin = c.TTL / 5
	}
	if c.RenewInterval == 0 {
		c.RenewInterval = min(c.TTL/3, (c.TTL-c.Margin)/2)
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 5 * time.Second
	}
	switch {
	case c.TTL < MinTTL || c.TTL > MaxTTL:
		return c, fmt.Errorf("%w: invalid config: TTL %v outside [%v, %v]", ErrInvalid, c.TTL, MinTTL, MaxTTL)
	case c.Margin < 0 || c.Margin >= c.TTL:
		return c, fmt.Errorf("%w: invalid config: Margin %v outside [0, TTL %v)", ErrInvalid, c.Margin, c.TTL)
	case c.RenewInterval <= 0 || c.RenewInterval >= c.TTL-c.Margin:
		// The attempt gives up at TTL - Margin: a first renewal due then or
		// later never comes, and every lease would run out under the work.
		return c, fmt.Errorf("%w: invalid config: RenewInterval %v not within (0, TTL - Margin = %v)", ErrInvalid, c.RenewInterval, c.TTL-c.Margin)
	case c.WriteTimeout < 0:
		return c, fmt.Errorf("%w: invalid config: negative WriteTimeout", ErrInvalid)
	}
	return c, nil
}

// Leased runs work whose effect lies outside the database — a call to a
// payment provider — at most once per key as far as the store can tell: it
// claims the key with a lease and a fencing token, renews the lease while
// the work runs, and stores the result with a compare-and-set on the token.
// It implements Executor. It is safe for concurrent use.
//
// A Leased attempt whose lease is lost (a pause, a partition) has its
// context cancelled with a cause matching ErrLeaseLost; once a retry has
// taken over, the stale attempt's Complete, Checkpoint and Release are
// refused and its Do returns a *SupersededError instead of its result.
// Whether the external effect itself ran twice is up to the downstream
// service: give it Attempt.DeriveKey.
type Leased struct {
	store LeaseStore
	cfg   LeasedConfig
}

// NewLeased returns a Leased executor on store. A nil cfg means defaults.
func NewLeased(store LeaseStore, cfg *LeasedConfig) (*Leased, error) {
	var c LeasedConfig
	if cfg != nil {
		c = *cfg
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, fmt.Errorf("%w: invalid config: nil LeaseStore", ErrInvalid)
	}
	return &Leased{store: store, cfg: c}, nil
}

var errStopped = errors.New("idempotency: attempt finished")

// Do implements Executor in leased mode. A done key replays its result; a key
// whose attempt holds a live lease gives an *InFlightError; otherwise Do
// claims the key (taking over an expired attempt, with its recovery point)
// and runs fn with a context that carries the *Attempt (AttemptFrom) and is
// cancelled when the lease is lost. When fn returns a result, Do stores it if
// the attempt still owns the record and returns a *SupersededError if a
// newer attempt took over. When fn fails, Do releases the key (see
// LeaseStore.Release) and returns fn's error; so it does, with an error
// matching ErrRecoveryPointNotReached, when fn's steps skipped and never
// reached the recovery point the attempt resumed after (see Attempt.Step).
// When fn panics, Do releases the key too, and the panic continues.
func (l *Leased) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	lease, replay, err := l.store.Claim(ctx, key, fp, l.cfg.TTL)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return *replay, nil
	}
	a := &Attempt{store: l.store, lease: lease, skipping: lease.RecoveryPoint != ""}
	actx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go a.keep(actx, cancel, l.cfg, done)
	stop := func() { cancel(errStopped); <-done }
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (or called runtime.Goexit): stop the renewals and
		// give the key up as a failed attempt does, so that a retry need
		// not wait for the lease to run out. The panic goes on.
		stop()
		wctx, wcancel := l.writeContext(ctx)
		defer wcancel()
		_ = l.store.Release(wctx, a.Lease()) // if it fails, the lease runs out
	}()
	res, ferr := fn(context.WithValue(actx, attemptKey{}, a))
	returned = true
	stop()
	if ferr == nil {
		ferr = a.unreached()
	}

	wctx, wcancel := l.writeContext(ctx)
	defer wcancel()
	final := a.Lease()
	if ferr != nil {
		if rerr := l.store.Release(wctx, final); rerr != nil {
			return Result{}, errors.Join(ferr, rerr)
		}
		return Result{}, ferr
	}
	res.Replayed = false
	if err := l.store.Complete(wctx, final, res); err != nil {
		return Result{}, err
	}
	return res, nil
}

// writeContext is the context of a write after the work: it survives the
// end of ctx, and its WriteTimeout starts now.
func (l *Leased) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), l.cfg.WriteTimeout)
}

type attemptKey struct{}

// AttemptFrom returns the attempt that the context's work runs as, inside
// Leased.Do or Fenced.Do.
func AttemptFrom(ctx context.Context) (*Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(*Attempt)
	return a, ok
}

// Attempt is one execution of a key in leased mode (or under the fenced
// twin's lock). Its methods are safe for concurrent use.
type Attempt struct {
	store LeaseStore // nil under the fenced twin

	mu       sync.Mutex
	lease    Lease
	skipping bool // Step is still passing steps done by earlier attempts
	skipped  bool // Step skipped at least one step
}

// unreached returns an error matching ErrRecoveryPointNotReached when the
// attempt's steps skipped and never reached the recovery point it resumed
// after: its result would claim work that nobody did.
func (a *Attempt) unreached() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.skipping || !a.skipped {
		return nil
	}
	return fmt.Errorf("%w: %s resumes after step %s, which none of its steps is; nothing stored",
		ErrRecoveryPointNotReached, a.lease.Key, short.Quote(a.lease.RecoveryPoint))
}

// Key returns the attempt's key.
func (a *Attempt) Key() Key { return a.Lease().Key }

// Token returns the attempt's fencing token: higher than every earlier
// attempt's for the key.
func (a *Attempt) Token() int64 { return a.Lease().Token }

// Lease returns the attempt's lease as of its last renewal.
func (a *Attempt) Lease() Lease {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lease
}

// RecoveryPoint returns the last completed step: from an earlier attempt
// when this one started, or from this attempt's own Checkpoint.
func (a *Attempt) RecoveryPoint() string { return a.Lease().RecoveryPoint }

// DeriveKey returns the key to send a downstream service for this request:
// the same for every attempt of the key (see the function DeriveKey).
func (a *Attempt) DeriveKey(parts ...string) string { return DeriveKey(a.Key(), parts...) }

// Checkpoint records step as the key's recovery point, with a
// compare-and-set on the attempt's token: it returns a *SupersededError when
// a newer attempt owns the key. Work that resumes by itself (reading
// RecoveryPoint) uses it instead of Step; after it, Step no longer skips.
func (a *Attempt) Checkpoint(ctx context.Context, step string) error {
	if a.store == nil {
		return fmt.Errorf("%w: the fenced twin has no recovery points", ErrInvalid)
	}
	if err := a.store.Checkpoint(ctx, a.Lease(), step); err != nil {
		return err
	}
	a.mu.Lock()
	a.lease.RecoveryPoint = step
	a.skipping = false // the work has placed itself
	a.mu.Unlock()
	return nil
}

// Step runs one named step of the work and records it as the recovery
// point. Steps run in program order; on an attempt that resumes an earlier
// one, every step up to and including the recorded recovery point is skipped
// (fn does not run) and the first step after it runs. Step names must be
// unique within the work and stable across deployments: an attempt whose
// steps never reach the recorded point (a renamed step, a branch not taken)
// skipped work it cannot prove was done, so Leased.Do fails it with
// ErrRecoveryPointNotReached and stores nothing. Under the fenced twin, Step
// just runs fn.
func (a *Attempt) Step(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if err := validStep(name); err != nil {
		return err
	}
	a.mu.Lock()
	if a.skipping {
		a.skipped = true
		if name == a.lease.RecoveryPoint {
			a.skipping = false
		}
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	if err := fn(ctx); err != nil {
		return err
	}
	if a.store == nil {
		return nil
	}
	return a.Checkpoint(ctx, name)
}

// keep renews the attempt's lease until ctx ends, and cancels ctx with a
// cause matching ErrLeaseLost when the lease is lost or about to run out.
func (a *Attempt) keep(ctx context.Context, cancel context.CancelCauseFunc, cfg LeasedConfig, done chan struct{}) {
	defer close(done)
	for {
		lease := a.Lease()
		deadline := lease.sent.Add(lease.TTL - cfg.Margin)
		next := time.Now().Add(cfg.RenewInterval)
		if next.After(deadline) {
			next = deadline
		}
		if !sleepUntil(ctx, next) {
			return
		}
		for {
			if !time.Now().Before(deadline) {
				cancel(fmt.Errorf("%w: not renewed within its safety margin", ErrLeaseLost))
				return
			}
			rctx, rcancel := context.WithDeadline(ctx, deadline)
			renewed, err := a.store.Renew(rctx, lease)
			rcancel()
			if err == nil {
				a.mu.Lock()
				renewed.RecoveryPoint = a.lease.RecoveryPoint
				a.lease = renewed
				a.mu.Unlock()
				break
			}
			if errors.Is(err, ErrLeaseLost) {
				cancel(err)
				return
			}
			if errors.Is(err, ErrSuperseded) {
				cancel(fmt.Errorf("%w: %w", ErrLeaseLost, err))
				return
			}
			if ctx.Err() != nil {
				return
			}
			retry := time.Now().Add(cfg.RenewInterval / 4)
			if retry.After(deadline) {
				retry = deadline
			}
			if !sleepUntil(ctx, retry) {
				return
			}
		}
	}
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
