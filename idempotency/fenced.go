package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// FencedConfig configures the fenced-lock twin. The zero value is valid.
type FencedConfig struct {
	// TTL is the lock's lease. Defaults to 30s.
	TTL time.Duration
	// Keepalive configures the renewal of the lock while the work runs.
	// Defaults to the fencedlock.KeepaliveConfig defaults.
	Keepalive *fencedlock.KeepaliveConfig
	// Holder names this executor to the lock service. Defaults to a random
	// name per Fenced.
	Holder string
	// RetryAfter is the retry hint when the lock is held. Defaults to 1s.
	RetryAfter time.Duration
	// WriteTimeout bounds each write after the work returns — the record,
	// then the release — counted from the end of the work, however long it
	// ran. Defaults to 5s.
	WriteTimeout time.Duration
}

// Fenced is the fenced-lock twin of idempotency keys, for comparison: lock
// the key (fencedlock), check whether it is done, execute, record the result
// with a write fenced by the lock's token, release. It implements Executor
// and is safe for concurrent use.
//
// The lock only makes a duplicate wait or fail (efficiency); what keeps a
// holder that paused past its lease from overwriting a newer holder's record
// is the fenced write (PutFenced), which returns a *fencedlock.FencedError.
// The work itself runs twice in that case unless it, too, presents the token
// (Attempt.Token) to its resource — the transactional mode has no such gap.
type Fenced struct {
	locks   fencedlock.Store
	records FencedStore
	cfg     FencedConfig
}

// NewFenced returns the twin on a lock service and a record store (a
// *Memory or *Postgres). A nil cfg means defaults.
func NewFenced(locks fencedlock.Store, records FencedStore, cfg *FencedConfig) (*Fenced, error) {
	var c FencedConfig
	if cfg != nil {
		c = *cfg
	}
	if c.TTL == 0 {
		c.TTL = 30 * time.Second
	}
	if c.Holder == "" {
		var b [8]byte
		rand.Read(b[:])
		c.Holder = "idempotency-" + hex.EncodeToString(b[:])
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = time.Second
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 5 * time.Second
	}
	if locks == nil || records == nil {
		return nil, fmt.Errorf("%w: invalid config: nil lock or record store", ErrInvalid)
	}
	return &Fenced{locks: locks, records: records, cfg: c}, nil
}

// LockName returns the fencedlock name under which the twin locks key.
func LockName(key Key) string { return "idempotency/" + DeriveKey(key) }

// Do implements Executor with a fenced lock. fn's context carries an
// *Attempt (AttemptFrom) whose Token is the lock's fencing token, and is
// cancelled when the lease can no longer be trusted. A held lock gives an
// *InFlightError; a stale recording gives an error matching
// fencedlock.ErrFenced, and fn's result is not returned.
func (f *Fenced) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (Result, error) {
	if err := key.Validate(); err != nil {
		return Result{}, err
	}
	lease, err := f.locks.Acquire(ctx, LockName(key), f.cfg.Holder, f.cfg.TTL)
	if errors.Is(err, fencedlock.ErrHeld) {
		return Result{}, &InFlightError{Key: key, RetryAfter: f.cfg.RetryAfter}
	}
	if err != nil {
		return Result{}, fmt.Errorf("idempotency: lock %s: %w", key, err)
	}
	k, err := fencedlock.Keep(ctx, f.locks, lease, f.cfg.Keepalive)
	if err != nil {
		return Result{}, errors.Join(err, f.locks.Release(context.WithoutCancel(ctx), lease))
	}
	defer func() {
		wctx, wcancel := f.writeContext(ctx)
		defer wcancel()
		// A failed release (ErrNotHeld: the lease expired) needs nothing:
		// the lease runs out on its own, and the fenced write decided the
		// outcome.
		_ = k.Release(wctx)
	}()

	rec, found, err := f.records.Lookup(ctx, key)
	if err != nil {
		return Result{}, err
	}
	if found {
		res, err := classify(rec, fp, f.cfg.RetryAfter)
		if err != nil {
			return Result{}, err
		}
		return *res, nil
	}
	a := &Attempt{lease: Lease{Key: key, Token: lease.Token, TTL: lease.TTL, Expires: lease.Expires}}
	res, err := fn(context.WithValue(k.Context(), attemptKey{}, a))
	if err != nil {
		return Result{}, err
	}
	res.Replayed = false
	wctx, wcancel := f.writeContext(ctx)
	defer wcancel()
	if err := f.records.PutFenced(wctx, key, fp, lease.Token, res); err != nil {
		return Result{}, err
	}
	return res, nil
}

// writeContext is the context of a write after the work: it survives the
// end of ctx, and its WriteTimeout starts now, not when the work started.
func (f *Fenced) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), f.cfg.WriteTimeout)
}
