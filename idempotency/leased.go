package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/renew"
	"github.com/lockfree-go/lockfree/internal/short"
)

// LeasedConfig configures a Leased executor. A nil *LeasedConfig means the
// defaults.
type LeasedConfig struct {
	// TTL is the lease of each attempt, between MinTTL and MaxTTL. Defaults
	// to 30s.
	TTL time.Duration
	// Keepalive configures the renewal of the lease while the work runs:
	// the interval, the margin before the lease's end at which the work's
	// context is cancelled without a renewal, and how often a lease may be
	// renewed before that happens anyway. Defaults to the
	// fencedlock.KeepaliveConfig defaults (Interval TTL/3, Margin TTL/5, at
	// most 100 renewals).
	Keepalive *fencedlock.KeepaliveConfig
	// ReleaseTimeout bounds the completion or release after the work
	// returns; they run even when the caller's context has ended, and the
	// bound starts when the work returns. Defaults to 5s.
	ReleaseTimeout time.Duration
	// MeterProvider receives the metrics of Do (docs/idempotency.md,
	// "Metrics"). Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span for each Do. Defaults to none.
	TracerProvider trace.TracerProvider
}

// DefaultLeasedTTL is a leased attempt's lease when LeasedConfig.TTL is zero.
const DefaultLeasedTTL = 30 * time.Second

func (c *LeasedConfig) withDefaults() LeasedConfig {
	var d LeasedConfig
	if c != nil {
		d = *c
	}
	if d.TTL == 0 {
		d.TTL = DefaultLeasedTTL
	}
	if d.ReleaseTimeout == 0 {
		d.ReleaseTimeout = 5 * time.Second
	}
	return d
}

func (c LeasedConfig) validate() error {
	if c.TTL < MinTTL || c.TTL > MaxTTL {
		return fmt.Errorf("%w: TTL %v outside [%v, %v]", ErrInvalid, c.TTL, MinTTL, MaxTTL)
	}
	if c.ReleaseTimeout < 0 {
		return fmt.Errorf("%w: ReleaseTimeout %v must not be negative", ErrInvalid, c.ReleaseTimeout)
	}
	if err := c.Keepalive.WithDefaults(c.TTL).Validate(c.TTL); err != nil {
		// A renewal interval that reaches the margin would never renew in
		// time, and every lease would run out under the work.
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// schedule is the renewal loop of every attempt.
func (c LeasedConfig) schedule() renew.Config {
	k := c.Keepalive.WithDefaults(c.TTL)
	return renew.Config{TTL: c.TTL, Interval: k.Interval, Margin: k.Margin, MaxRenewals: k.MaxRenewals,
		Expiring:  fmt.Errorf("%w: not renewed within its safety margin", ErrLeaseLost),
		Exhausted: fmt.Errorf("%w: renewed %d times, as often as Keepalive.MaxRenewals allows", ErrLeaseLost, k.MaxRenewals)}
}

// Leased runs work whose effect lies outside the database — a call to a
// payment provider — at most once per key as far as the store can tell: it
// claims the key with a lease and a fencing token, renews the lease while
// the work runs (with lockfree's one renewal loop, as fencedlock's
// keepalive does), and stores the result with a compare-and-set on the
// token. It implements Executor. It is safe for concurrent use; the zero
// value is not usable: call NewLeased.
//
// A Leased attempt whose lease is lost (a pause, a partition) has its
// context cancelled with a cause matching ErrLeaseLost; once a retry has
// taken over, the stale attempt's Complete, Checkpoint and Release are
// refused and its Do returns a *SupersededError instead of its result.
// Whether the external effect itself ran twice is up to the downstream
// service: give it Attempt.DeriveKey.
type Leased struct {
	tel      *execTelemetry
	store    LeaseStore
	cfg      LeasedConfig
	schedule renew.Config
}

// NewLeased returns a Leased executor on store. A nil cfg means the
// defaults. A nil store or a bad cfg (a TTL outside [MinTTL, MaxTTL], a
// Keepalive that cannot keep the lease) give an error matching ErrInvalid.
func NewLeased(store LeaseStore, cfg *LeasedConfig) (*Leased, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil LeaseStore", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	return &Leased{store: store, cfg: c, schedule: c.schedule(), tel: newTelemetry(c.MeterProvider, c.TracerProvider, "leased")}, nil
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
func (l *Leased) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (done Result, err error) {
	ctx, exec := l.tel.start(ctx)
	defer func() { exec.end(ctx, done, err) }()
	lease, replay, err := l.store.Claim(ctx, key, fp, l.cfg.TTL)
	if err != nil {
		return Result{}, err
	}
	if replay != nil {
		return *replay, nil
	}
	a := &Attempt{store: l.store, lease: lease, skipping: lease.RecoveryPoint != ""}
	loop := renew.Start(ctx, l.schedule, lease.sent, a.renew)
	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (or called runtime.Goexit): stop the renewals and
		// give the key up as a failed attempt does, so that a retry need
		// not wait for the lease to run out. The panic goes on.
		loop.Stop(errStopped)
		wctx, cancel := l.writeContext(ctx)
		defer cancel()
		_ = l.store.Release(wctx, a.Lease()) // if it fails, the lease runs out
	}()
	res, ferr := fn(context.WithValue(loop.Context(), attemptKey{}, a))
	returned = true
	loop.Stop(errStopped)
	if ferr == nil {
		ferr = a.unreached()
	}
	wctx, cancel := l.writeContext(ctx)
	defer cancel()
	if ferr != nil {
		if rerr := l.store.Release(wctx, a.Lease()); rerr != nil {
			return Result{}, errors.Join(ferr, rerr)
		}
		return Result{}, ferr
	}
	res.Replayed = false
	failpoint.Inject(ctx, "idempotency.leased.before-write")
	if err := l.store.Complete(wctx, a.Lease(), res); err != nil {
		return Result{}, err
	}
	return res, nil
}

// writeContext is the context of a write after the work: it survives the
// end of ctx, and its ReleaseTimeout starts now.
func (l *Leased) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ReleaseTimeout)
}

type attemptKey struct{}

// AttemptFrom returns the attempt that the context's work runs as, inside
// Leased.Do or Fenced.Do.
func AttemptFrom(ctx context.Context) (*Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(*Attempt)
	return a, ok
}

// Attempt is one execution of a key in leased mode (or under the fenced
// twin's lock). Its methods are safe for concurrent use. Leased.Do and
// Fenced.Do make it; the zero value is not usable.
type Attempt struct {
	store LeaseStore // nil under the fenced twin

	mu       sync.Mutex
	lease    Lease
	skipping bool // Step is still passing steps done by earlier attempts
	skipped  bool // Step skipped at least one step
}

// renew renews the attempt's lease once, for its renewal loop: a lease that
// expired or was taken over is lost for good.
func (a *Attempt) renew(ctx context.Context) error {
	renewed, err := a.store.Renew(ctx, a.Lease())
	switch {
	case errors.Is(err, ErrLeaseLost):
		return renew.Lost(err)
	case errors.Is(err, ErrSuperseded):
		return renew.Lost(fmt.Errorf("%w: %w", ErrLeaseLost, err))
	case err != nil:
		return err
	}
	a.mu.Lock()
	renewed.RecoveryPoint = a.lease.RecoveryPoint
	a.lease = renewed
	a.mu.Unlock()
	return nil
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
