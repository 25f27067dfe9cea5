package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
)

// FencedConfig configures the fenced-lock twin. A nil *FencedConfig means
// the defaults.
type FencedConfig struct {
	// LockerConfig configures the lock: Holder (a UUIDv7 per Fenced), TTL
	// (10s), Wait, Keepalive, ReleaseTimeout (5s; it also bounds the record
	// written after the work) and LockPrefix, which defaults here to
	// "idempotency/".
	fencedlock.LockerConfig
	// InFlightWait bounds how long a duplicate waits for the lock of an
	// execution in flight before it gets ErrInFlight, as in transactional
	// mode; at least 1ms. Defaults to 2s.
	InFlightWait time.Duration
	// RetryAfter is the retry hint of the InFlightError. Defaults to 1s.
	RetryAfter time.Duration
}

func (c *FencedConfig) withDefaults() FencedConfig {
	var d FencedConfig
	if c != nil {
		d = *c
	}
	if d.LockPrefix == "" {
		d.LockPrefix = "idempotency/"
	}
	if d.ReleaseTimeout == 0 {
		d.ReleaseTimeout = 5 * time.Second
	}
	d.InFlightWait, d.RetryAfter = waitDefaults(d.InFlightWait, d.RetryAfter)
	return d
}

func (c FencedConfig) validate() error {
	if c.ReleaseTimeout < 0 {
		return fmt.Errorf("%w: ReleaseTimeout %v must not be negative", ErrInvalid, c.ReleaseTimeout)
	}
	return validateWait(c.InFlightWait, c.RetryAfter)
}

// Fenced is the fenced-lock twin of idempotency keys, for comparison: lock
// the key (a fencedlock.Locker), read the record with a fenced read (which
// stamps it with the lock's token) and replay it if it is done, run the
// work, store the result with a write fenced by the token, release. It
// implements Executor. It is safe for concurrent use; the zero value is not
// usable: call NewFenced.
//
// The lock only makes a duplicate wait (efficiency); what keeps a holder that
// paused past its lease from storing its result after a newer holder read
// the record is the fence, which answers it with a *fencedlock.FencedError.
// The work itself runs twice in that case unless it, too, presents the token
// (Attempt.Token) to its resource — the transactional mode has no such gap.
type Fenced struct {
	tel     *execTelemetry
	locker  *fencedlock.Locker
	records FencedStore
	cfg     FencedConfig
}

// NewFenced returns the twin on a lock service and a record store (a
// *Memory or *Postgres). A nil cfg means the defaults. A nil store or a bad
// cfg give an error matching ErrInvalid (and fencedlock.ErrInvalid for the
// LockerConfig). It does no I/O.
func NewFenced(locks fencedlock.Store, records FencedStore, cfg *FencedConfig) (*Fenced, error) {
	if locks == nil || records == nil {
		return nil, fmt.Errorf("%w: nil lock or record store", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	locker, err := fencedlock.NewLocker(locks, &c.LockerConfig)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Fenced{locker: locker, records: records, cfg: c, tel: newTelemetry(c.MeterProvider, c.TracerProvider, "fenced")}, nil
}

// LockName returns the full name of the lock under which the twin runs key:
// LockPrefix and a name-based UUID of the key (DeriveKey), which fits in a
// lock name whatever the key's length.
func (f *Fenced) LockName(key Key) string { return f.cfg.LockPrefix + lockName(key) }

func lockName(key Key) string { return DeriveKey(key, "lock") }

// ErrUnrecorded reports that the fenced twin ran the work to the end (fn
// returned a Result and no error: its effects happened) but could not store
// that result: a newer holder had taken the key over after this holder's
// lease expired, or the store failed. The error is an *UnrecordedError
// carrying the Result, which is the request's outcome: report it, and do
// not redo the work under another key. It does not match
// fencedlock.ErrFenced, which tells a holder that nothing of its own
// happened.
var ErrUnrecorded = errors.New("idempotency: work done, result not recorded")

// UnrecordedError is the outcome of a fenced execution whose work was done
// and whose result was not stored. A later request with the same key is
// answered by the holder that took the key over, which runs the work again
// unless the work presents its token (Attempt.Token) to the resource it
// changes and so finds it done.
type UnrecordedError struct {
	Key Key
	// Result is what the work returned.
	Result Result
	// Err is why the result was not stored: a *fencedlock.FencedError
	// when a newer holder had stamped the record with a higher token, else
	// the store's error, after which the record may or may not hold Result.
	// It is not unwrapped, so that an UnrecordedError never passes for a
	// refusal (fencedlock.ErrFenced) or a failure of the work.
	Err error
}

func (e *UnrecordedError) Error() string {
	return fmt.Sprintf("idempotency: work of %s done (status %d), result not recorded: %v", e.Key, e.Result.Status, e.Err)
}

// Is reports whether target is ErrUnrecorded.
func (e *UnrecordedError) Is(target error) bool { return target == ErrUnrecorded }

// errWaitOver ends the wait for a busy lock after InFlightWait.
var errWaitOver = errors.New("idempotency: waited InFlightWait for the lock")

// Do implements Executor with a fenced lock. A duplicate waits for the lock
// while the key's execution is in flight, for at most InFlightWait, and then
// gets an *InFlightError. fn's context carries an *Attempt (AttemptFrom)
// whose Token is the lock's fencing token, and is cancelled when the lease
// can no longer be trusted. A holder whose token is no longer the record's
// when it reads it gets an error matching fencedlock.ErrFenced, and fn does
// not run: nothing of its own happened. When fn returned a result that
// could not be stored (a newer holder took the key over meanwhile, or the
// store failed), Do returns an *UnrecordedError (ErrUnrecorded) carrying
// it: the work was done. When fn fails or panics, the record's placeholder
// is removed, so that a retry runs again. Once the result is stored (or
// replayed), a failed release is no error: it only delays the next holder
// until the lease expires.
func (f *Fenced) Do(ctx context.Context, key Key, fp Fingerprint, fn func(ctx context.Context) (Result, error)) (done Result, err error) {
	ctx, exec := f.tel.start(ctx)
	defer func() { exec.end(ctx, done, err) }()
	if err := key.Validate(); err != nil {
		return Result{}, err
	}
	wait := startWait(ctx, f.cfg.InFlightWait)
	defer wait.stop()
	var res Result
	var unrecorded *UnrecordedError
	answered := false // run returned a result: stored, or replayed
	err = f.locker.Do(wait.ctx, lockName(key), func(ctx context.Context, lease fencedlock.Lease) error {
		if !wait.acquired() {
			return errWaitOver // acquired as the wait ended: give it back
		}
		var err error
		res, err = f.run(ctx, key, fp, lease, fn)
		if u, ok := errors.AsType[*UnrecordedError](err); ok {
			// The lock sees the store's answer, a fenced put counted as
			// the rejection it is; the caller sees that the work was done.
			unrecorded = u
			return u.Err
		}
		answered = err == nil
		return err
	})
	switch {
	case answered:
		return res, nil // a release error only delays the next holder
	case unrecorded != nil:
		return Result{}, unrecorded
	case errors.Is(err, errWaitOver) && ctx.Err() == nil:
		return Result{}, &InFlightError{Key: key, RetryAfter: f.cfg.RetryAfter}
	case err != nil:
		return Result{}, err
	}
	return res, nil
}

// run is Do's work under the lock.
func (f *Fenced) run(ctx context.Context, key Key, fp Fingerprint, lease fencedlock.Lease, fn func(ctx context.Context) (Result, error)) (Result, error) {
	rec, err := f.records.ReadFenced(ctx, key, fp, lease.Token)
	if err != nil {
		return Result{}, err
	}
	if rec.State != Running {
		res, err := classify(rec, fp, f.cfg.RetryAfter)
		if err != nil {
			return Result{}, err
		}
		return *res, nil
	}
	a := &Attempt{lease: Lease{Key: key, Token: lease.Token, TTL: lease.TTL, Expires: lease.Expires}}
	returned := false
	defer func() {
		if !returned { // fn panicked: leave no placeholder behind
			wctx, cancel := f.writeContext(ctx)
			defer cancel()
			_ = f.records.DropFenced(wctx, key, lease.Token)
		}
	}()
	res, err := fn(context.WithValue(ctx, attemptKey{}, a))
	returned = true
	// A stalled process does not notice that its lease's context was
	// cancelled meanwhile: only the fence decides the writes below.
	wctx, cancel := f.writeContext(ctx)
	defer cancel()
	if err != nil {
		if derr := f.records.DropFenced(wctx, key, lease.Token); derr != nil && !errors.Is(derr, fencedlock.ErrFenced) {
			return Result{}, errors.Join(err, derr)
		}
		return Result{}, err
	}
	res.Replayed = false
	failpoint.Inject(ctx, "idempotency.fenced.before-write")
	if err := f.records.PutFenced(wctx, key, fp, lease.Token, res); err != nil {
		return Result{}, &UnrecordedError{Key: key, Result: res, Err: err}
	}
	return res, nil
}

// writeContext is the context of a write after the work: it survives the
// end of ctx (the lease's), and its ReleaseTimeout starts now.
func (f *Fenced) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), f.cfg.ReleaseTimeout)
}

// boundedWait is the context of Locker.Do that ends the wait for the lock
// after a while, but not the work once the lock is held.
type boundedWait struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	state  atomic.Int32 // waiting, then acquired or over
}

const (
	waiting int32 = iota
	acquired
	over
)

func startWait(ctx context.Context, d time.Duration) *boundedWait {
	w := &boundedWait{}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	w.timer = time.AfterFunc(d, func() {
		if w.state.CompareAndSwap(waiting, over) {
			w.cancel(errWaitOver)
		}
	})
	return w
}

// acquired reports whether the lock came before the wait was over; from
// then on, the timer no longer ends the context.
func (w *boundedWait) acquired() bool { return w.state.CompareAndSwap(waiting, acquired) }

func (w *boundedWait) stop() {
	w.timer.Stop()
	w.cancel(nil)
}
