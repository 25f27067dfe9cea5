package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// LockerConfig configures a Locker. A nil *LockerConfig means the defaults.
// Every fenced twin's config embeds it, so these names and defaults are the
// same in every package.
type LockerConfig struct {
	// Holder identifies this process in the lock table (HeldError.Holder,
	// Lease.Holder). Defaults to a new UUIDv7 per Locker: time-ordered, and
	// unique without coordination.
	Holder string
	// TTL is the lease of each tenure, between MinTTL and MaxTTL. Defaults
	// to 10s.
	TTL time.Duration
	// LockPrefix is prepended to every name given to Do and TryDo, so that
	// several users of one lock table do not collide; prefix and name
	// together must be a valid lock name. Defaults to "".
	LockPrefix string
	// Wait configures the wait for a busy lock in Do. Defaults to the
	// WaitConfig defaults (with the store's own wake-ups).
	Wait *WaitConfig
	// Keepalive configures the renewal of the lease while fn runs.
	// Defaults to the KeepaliveConfig defaults.
	Keepalive *KeepaliveConfig
	// ReleaseTimeout bounds the release after fn returns; the release runs
	// even when the caller's context has ended. Defaults to 5s.
	ReleaseTimeout time.Duration
	// MeterProvider receives the Locker's metrics (docs/fencedlock.md,
	// "Metrics"), and those of the fenced twin that embeds this config.
	// Defaults to none: nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span for each Do and TryDo, with the lock
	// name, holder and token. Defaults to none: no span is started.
	TracerProvider trace.TracerProvider
}

// DefaultTTL is a Locker's lease when LockerConfig.TTL is zero.
const DefaultTTL = 10 * time.Second

func (c *LockerConfig) withDefaults() LockerConfig {
	var d LockerConfig
	if c != nil {
		d = *c
	}
	if d.Holder == "" {
		d.Holder = uuid.Must(uuid.NewV7()).String()
	}
	if d.TTL == 0 {
		d.TTL = DefaultTTL
	}
	if d.ReleaseTimeout == 0 {
		d.ReleaseTimeout = 5 * time.Second
	}
	return d
}

func (c LockerConfig) validate(store Store) error {
	if err := validName("holder", c.Holder); err != nil {
		return err
	}
	if len(c.LockPrefix) >= MaxNameLen || !utf8.ValidString(c.LockPrefix) || strings.ContainsRune(c.LockPrefix, 0) {
		return fmt.Errorf("%w: lock prefix must be valid UTF-8 without NUL, shorter than %d bytes", ErrInvalid, MaxNameLen)
	}
	if c.ReleaseTimeout < 0 {
		return fmt.Errorf("%w: negative release timeout %v", ErrInvalid, c.ReleaseTimeout)
	}
	if err := c.Keepalive.withDefaults(c.TTL).Validate(c.TTL); err != nil {
		return err
	}
	return c.Wait.withDefaults(store).validate()
}

// Locker runs functions under a lock: acquire → keepalive → fn → release,
// with the keepalive's stop and the release deferred, so that a fn that
// panics releases the lease before the panic goes on. It is the building
// block of every fenced twin in lockfree. It is safe for concurrent use; the
// zero value is not usable: call NewLocker.
//
// The lock alone excludes nothing once a holder pauses past its lease: fn
// must present lease.Token to the resource (Fence.Update, Postgres.Verify,
// Gate.Do), which rejects a stale holder's write.
type Locker struct {
	store Store
	cfg   LockerConfig
	wait  WaitConfig
	tel   *lockerTelemetry
}

// NewLocker returns a Locker on store. A nil cfg means the defaults. A nil
// store or a bad cfg (a bad Holder, TTL, LockPrefix, Keepalive or Wait)
// give an error matching ErrInvalid; it does no I/O.
func NewLocker(store Store, cfg *LockerConfig) (*Locker, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(store); err != nil {
		return nil, err
	}
	return &Locker{store: store, cfg: c, wait: c.Wait.withDefaults(store), tel: newLockerTelemetry(c)}, nil
}

// Holder returns the holder identity the Locker acquires with.
func (l *Locker) Holder() string { return l.cfg.Holder }

// Do acquires the lock LockPrefix+name, waiting while another holder has
// it until ctx ends (then ctx's cause joined with the last *HeldError), and
// runs fn with the lease. fn's context is the keepalive's: it is cancelled,
// with a cause (ErrLost, ErrExpiring, ErrMaxRenewals), when the lease can no
// longer be trusted. When fn returns or panics, the keepalive stops and the
// lease is released (bounded by ReleaseTimeout, even if ctx has ended).
//
// Do returns fn's error as it is — a *FencedError from the resource is an
// error like any other, for errors.As — joined with the release's error, if
// any. A release that finds the lease already gone (ErrNotHeld: it expired
// under fn) is not an error: the resource's fencing decided fn's writes.
func (l *Locker) Do(ctx context.Context, name string, fn func(ctx context.Context, lease Lease) error) error {
	return l.do(ctx, name, true, fn)
}

// TryDo is Do without the wait: when another holder has the lock it returns
// a *HeldError at once and fn does not run.
func (l *Locker) TryDo(ctx context.Context, name string, fn func(ctx context.Context, lease Lease) error) error {
	return l.do(ctx, name, false, fn)
}

func (l *Locker) do(ctx context.Context, name string, wait bool, fn func(ctx context.Context, lease Lease) error) (err error) {
	full := l.cfg.LockPrefix + name
	if err := validName("lock name", full); err != nil {
		return err
	}
	ctx, span := l.tel.tracer.Start(ctx, "fencedlock.Do")
	defer func() { span.End(err) }()
	if span.Recording() {
		span.Set(attribute.String(telemetry.LockName, full), attribute.String(telemetry.Holder, l.cfg.Holder))
	}
	lease, err := l.acquire(ctx, full, wait)
	if err != nil {
		return err
	}
	if span.Recording() {
		span.Set(attribute.Int64(telemetry.LockToken, lease.Token))
	}
	return l.hold(ctx, []Lease{lease}, func(ctx context.Context) error { return fn(ctx, lease) })
}

// hold runs fn with leases kept alive, and releases them all when fn
// returns or panics (bounded by ReleaseTimeout, even after ctx ended).
// Each keepalive's context is the next one's parent: fn's ends with the
// first lease that cannot be trusted. A keepalive that cannot start keeps
// fn from running.
func (l *Locker) hold(ctx context.Context, leases []Lease, fn func(ctx context.Context) error) (err error) {
	keeps := make([]*Keepalive, 0, len(leases))
	held := ctx
	defer func() {
		if len(keeps) == len(leases) {
			l.tel.finished(ctx, context.Cause(held), err)
			failpoint.Inject(ctx, "fencedlock.locker.before-release")
		}
		for i, lease := range leases {
			var k *Keepalive
			if i < len(keeps) {
				k = keeps[i]
			}
			if rerr := l.release(ctx, lease, k); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	for _, lease := range leases {
		k, err := keep(held, l.store, lease, l.cfg.Keepalive, l.tel)
		if err != nil {
			return err
		}
		keeps = append(keeps, k)
		held = k.Context()
	}
	failpoint.Inject(held, "fencedlock.locker.acquired")
	return fn(held)
}

// DoAll is Do for several locks: it acquires LockPrefix+name for each of
// names, waiting while any is held, and runs fn with leases[i] the lease
// of names[i]. On a MultiStore (Memory, Postgres) each attempt is one
// AcquireAll, all or nothing: it never holds some of the locks while it
// waits for the others. On any other Store it takes them as Do does, one
// after another in sorted order, so that two DoAll of overlapping names
// cannot wait on each other in a cycle. fn's context is cancelled, with
// its cause, as soon as any of the leases can no longer be trusted; when
// fn returns or panics, every lease is released. Between 1 and
// MaxAcquireAll distinct names, or ErrInvalid before any attempt.
func (l *Locker) DoAll(ctx context.Context, names []string, fn func(ctx context.Context, leases []Lease) error) (err error) {
	full := make([]string, len(names))
	for i, n := range names {
		full[i] = l.cfg.LockPrefix + n
	}
	order, err := validAcquireAll(full, l.cfg.Holder, l.cfg.TTL)
	if err != nil {
		return err
	}
	ms, ok := l.store.(MultiStore)
	if !ok {
		return l.doEach(ctx, names, order, fn)
	}
	ctx, span := l.tel.tracer.Start(ctx, "fencedlock.DoAll")
	defer func() { span.End(err) }()
	if span.Recording() {
		span.Set(attribute.StringSlice(telemetry.LockName, full), attribute.String(telemetry.Holder, l.cfg.Holder))
	}
	start := time.Now()
	var leases []Lease
	err = l.wait.retry(ctx, full[order[0]], func() (err error) {
		leases, err = l.tel.tryAcquireAll(ctx, ms, full, l.cfg.Holder, l.cfg.TTL)
		return err
	})
	l.tel.waited(ctx, start, err)
	if err != nil {
		return err
	}
	return l.hold(ctx, leases, func(ctx context.Context) error { return fn(ctx, leases) })
}

// doEach is DoAll on a store without AcquireAll: Do for each name, in
// order (sorted), each inside the last.
func (l *Locker) doEach(ctx context.Context, names []string, order []int, fn func(ctx context.Context, leases []Lease) error) error {
	leases := make([]Lease, len(names))
	var next func(ctx context.Context, k int) error
	next = func(ctx context.Context, k int) error {
		if k == len(order) {
			return fn(ctx, leases)
		}
		return l.do(ctx, names[order[k]], true, func(ctx context.Context, lease Lease) error {
			leases[order[k]] = lease
			return next(ctx, k+1)
		})
	}
	return next(ctx, 0)
}

// acquire gets the lease of full: one attempt, or a wait.
func (l *Locker) acquire(ctx context.Context, full string, wait bool) (Lease, error) {
	try := func() (Lease, error) { return l.tel.tryAcquire(ctx, l.store, full, l.cfg.Holder, l.cfg.TTL) }
	if !wait {
		return try()
	}
	start := time.Now()
	lease, err := l.wait.acquire(ctx, full, try)
	l.tel.waited(ctx, start, err)
	return lease, err
}

// release stops k (when set) and releases its lease, bounded by
// ReleaseTimeout from now. A lease that is gone already is not an error.
func (l *Locker) release(ctx context.Context, lease Lease, k *Keepalive) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ReleaseTimeout)
	defer cancel()
	var err error
	if k != nil {
		err = k.Release(rctx)
	} else {
		err = l.store.Release(rctx, lease)
	}
	if errors.Is(err, ErrNotHeld) {
		return nil
	}
	return err
}
