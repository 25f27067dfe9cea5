package leader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// Election is one named election on a store: candidates Campaign, anyone
// observes. It is safe for concurrent use; the zero value is not usable:
// call NewElection. Several candidates in one process need an Election
// each, with its own Holder.
type Election struct {
	store Store
	name  string // the election's name, without the prefix
	lock  string // LockPrefix + name
	cfg   Config
	keep  fencedlock.KeepaliveConfig
	tel   *electionTelemetry
}

// NewElection returns the election name on store. A nil cfg means the
// defaults. A nil store, a name that makes an invalid lock name with the
// prefix, or a bad cfg give an error matching ErrInvalid; it does no I/O.
func NewElection(store Store, name string, cfg *Config) (*Election, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty election name", ErrInvalid)
	}
	if err := validName("election lock name (prefix and name)", c.LockPrefix+name); err != nil {
		return nil, err
	}
	return &Election{store: store, name: name, lock: c.LockPrefix + name, cfg: c, keep: *c.Keepalive,
		tel: newTelemetry(c, name)}, nil
}

// Name returns the election's lock name: LockPrefix and name.
func (e *Election) Name() string { return e.lock }

// Holder returns the identity this Election campaigns with.
func (e *Election) Holder() string { return e.cfg.Holder }

// Campaign blocks until this candidate leads, then returns its term, with
// value as the leader's value (at most fencedlock.MaxValueLen bytes, or a
// *fencedlock.ValueTooLargeError matching ErrInvalid before anything is
// written). While another leads it waits, woken by the store's wake-ups or
// polling with backoff (Config.Wait), until ctx ends: it then returns ctx's
// cause joined with the last *fencedlock.HeldError, and holds nothing.
//
// ctx bounds the term too: when it ends, the term's context ends and its
// renewals stop. Pass the context that should end leadership (the
// service's), not a timeout for the campaign alone, and call Resign when
// done. A candidate that already leads under the same Holder (a restart)
// waits for that term's lease to expire: it never resumes a term.
func (e *Election) Campaign(ctx context.Context, value string) (*Term, error) {
	if err := fencedlock.ValidValue(value); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	sctx, span := e.tel.tracer.Start(ctx, "leader.Campaign")
	if span.Recording() {
		span.Set(attribute.String(telemetry.LockName, e.lock), attribute.String(telemetry.Holder, e.cfg.Holder))
	}
	start := time.Now()
	lease, err := fencedlock.AcquireValueWait(sctx, e.store, e.lock, e.cfg.Holder, e.cfg.TTL, value, e.cfg.Wait)
	e.tel.campaigned(ctx, start, err)
	if err != nil {
		span.End(err)
		return nil, err
	}
	// The keepalive runs on ctx, not on the span's context: the span ends
	// when Campaign returns, the term does not.
	k, err := fencedlock.Keep(ctx, e.store, lease, &e.keep)
	if err != nil { // NewElection validated the keepalive: not expected
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		err = errors.Join(err, e.store.Release(rctx, lease))
		span.End(err)
		return nil, err
	}
	if span.Recording() {
		span.Set(attribute.Int64(telemetry.LockToken, lease.Token))
	}
	span.End(nil)
	return e.newTerm(ctx, k, value), nil
}

// newTerm wraps the keepalive of an elected candidate's lease.
func (e *Election) newTerm(ctx context.Context, k *fencedlock.Keepalive, value string) *Term {
	// The term's context is the keepalive's: it ends, with the keepalive's
	// cause, before the store can elect anyone else.
	parent := k.Context()
	if failpoint.Mutant("leader.term.context") {
		parent = ctx // the campaign's: the leader is not told it lost its lease
	}
	tctx, cancel := context.WithCancelCause(parent)
	t := &Term{e: e, k: k, ctx: tctx, cancel: cancel, value: value}
	e.tel.elected(ctx)
	context.AfterFunc(tctx, func() { e.tel.ended(context.WithoutCancel(ctx), context.Cause(tctx)) })
	return t
}

// Leader returns who leads the election now; the zero Leader when no one
// does (the lock is free or its lease expired, on the store's clock).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	l, held, err := e.store.Holder(ctx, e.lock)
	if err != nil || !held {
		return Leader{}, err
	}
	return Leader{Holder: l.Holder, Term: l.Token, Value: l.Value}, nil
}

// Observe reports the election's leader on the returned channel: first as
// it is, then at each change of holder, term or value (the zero Leader when
// no one leads), until ctx ends; then the channel is closed. It reads the
// leader every ObserveInterval, and at once when the store's notice
// (fencedlock.Watcher) says it changed. Changes are coalesced: a reader
// that is slow, or two changes within one read, see the latest state only.
// A failed read is logged (Config.Logger) and retried at the next one.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	go e.observe(ctx, ch)
	return ch
}

func (e *Election) observe(ctx context.Context, ch chan<- Leader) {
	defer close(ch)
	watcher, _ := e.store.(fencedlock.Watcher)
	var last Leader
	sent := false
	for {
		// Watch before reading, so that a change in between is not missed.
		wake, stop := (<-chan struct{})(nil), func() {}
		if watcher != nil {
			wake, stop = watcher.Changed(e.lock)
		}
		cur, err := e.Leader(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if e.cfg.Logger != nil {
				e.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "leader: observe: read failed",
					slog.String(telemetry.LockName, e.lock), telemetry.Err(err))
			}
		case err == nil && (!sent || cur != last):
			select {
			case ch <- cur:
				last, sent = cur, true
			case <-ctx.Done():
				stop()
				return
			}
		}
		timer := time.NewTimer(e.cfg.ObserveInterval)
		select {
		case <-ctx.Done():
		case <-wake:
		case <-timer.C:
		}
		timer.Stop()
		stop()
		if ctx.Err() != nil {
			return
		}
	}
}

// Term is one candidate's tenure as leader, from Campaign. Its methods are
// safe for concurrent use.
type Term struct {
	e      *Election
	k      *fencedlock.Keepalive
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu    sync.Mutex
	value string
}

// Token returns the term's fencing token: present it to the resource
// (fencedlock.Fence, Postgres.Verify, Gate) with every write of the
// leader's work. It is the same for the whole term.
func (t *Term) Token() int64 { return t.k.Lease().Token }

// Lease returns the term's lease as of its last renewal, with its value.
func (t *Term) Lease() fencedlock.Lease {
	l := t.k.Lease()
	t.mu.Lock()
	l.Value = t.value
	t.mu.Unlock()
	return l
}

// Context is cancelled when the term can no longer be trusted, before the
// store can elect anyone else (while this process runs): context.Cause is
// fencedlock.ErrLost, ErrExpiring or ErrMaxRenewals (the lease), ErrResigned,
// or the cause of Campaign's ctx. Run the leader's work under it.
func (t *Term) Context() context.Context { return t.ctx }

// HeldSafely reports whether the term's lease is still within its safety
// margin and the term has not ended. A true answer is a belief: the process
// can pause right after asking.
func (t *Term) HeldSafely() bool { return t.ctx.Err() == nil && t.k.HeldSafely() }

// Proclaim changes the leader's value (at most fencedlock.MaxValueLen
// bytes) for observers. It returns an error matching ErrNotLeader when the
// term has ended or its lease is no longer current, and changes nothing
// then: no one else's term gets this value.
func (t *Term) Proclaim(ctx context.Context, value string) error {
	if err := fencedlock.ValidValue(value); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if t.ctx.Err() != nil {
		return fmt.Errorf("%w: %s term %d: %w", ErrNotLeader, short.Quote(t.e.lock), t.Token(), context.Cause(t.ctx))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, err := t.e.store.SetValue(ctx, t.k.Lease(), value)
	if errors.Is(err, fencedlock.ErrNotHeld) {
		return fmt.Errorf("%w: %s term %d: %w", ErrNotLeader, short.Quote(t.e.lock), t.Token(), err)
	}
	if err != nil {
		return err
	}
	t.value = value
	return nil
}

// Resign ends the term and hands over at once: it cancels the term's
// context (ErrResigned), stops the renewals and releases the lease, so that
// a waiting candidate is elected without waiting for the lease to expire.
// The release is bounded by ctx; a lease already lost is not an error.
// Resign may be called more than once, and after the term ended.
func (t *Term) Resign(ctx context.Context) error {
	t.cancel(ErrResigned)
	err := t.k.Release(ctx)
	if errors.Is(err, fencedlock.ErrNotHeld) {
		return nil
	}
	return err
}

// Done is closed when the term's renewals have stopped: after Resign, the
// loss of the lease, or the end of Campaign's ctx.
func (t *Term) Done() <-chan struct{} { return t.k.Done() }
