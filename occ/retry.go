package occ

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/attribute"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// Backoff says how often and how patiently to retry, with the meaning of
// client-go's wait.Backoff: Steps attempts in all, the first retry after
// Duration, each later delay Factor times the previous one, each delay
// lengthened by a random fraction up to Jitter of itself, and capped at Cap.
// Backoff is a value, safe to copy and share.
type Backoff struct {
	// Duration is the delay before the first retry.
	Duration time.Duration
	// Factor multiplies the delay after each retry; values below 1 mean 1.
	Factor float64
	// Jitter adds up to Jitter×delay (uniformly random) to each delay, so
	// that writers that conflicted together do not retry together.
	Jitter float64
	// Steps is the number of attempts, including the first; values below
	// 1 mean 1.
	Steps int
	// Cap bounds each delay, jitter included, when positive. Without it the
	// delay grows until it saturates at the longest time.Duration; it never
	// wraps around to no delay.
	Cap time.Duration
}

// The presets of client-go's retry package. They are values: pass a copy,
// or build your own Backoff; do not assign to them.
var (
	// DefaultRetry suits quick retries of a conflicting write: 5 attempts,
	// about 10ms apart.
	DefaultRetry = Backoff{Steps: 5, Duration: 10 * time.Millisecond, Factor: 1.0, Jitter: 0.1}
	// DefaultBackoff backs off quickly: 4 attempts after 10ms, 50ms and
	// 250ms.
	DefaultBackoff = Backoff{Steps: 4, Duration: 10 * time.Millisecond, Factor: 5.0, Jitter: 0.1}
)

// IsRetryable reports whether err is worth another attempt after a re-read:
// a version conflict (ErrConflict), or a transaction PostgreSQL aborted with
// serialization_failure (40001) or deadlock_detected (40P01), whether this
// package translated it (ErrAborted) or the caller's own SQL returned it.
func IsRetryable(err error) bool {
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrAborted) {
		return true
	}
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01")
}

// RetryOnConflict calls fn until it returns an error that is not retryable
// (IsRetryable), nil, or the attempts run out, sleeping between attempts as
// the backoff says (DefaultRetry unless WithBackoff), and calling the
// OnRetry hook before each retry. fn must re-read what it writes on every
// call: retrying the same stale write conflicts again. When the attempts run
// out it returns the last error wrapped (errors.Is(err, ErrConflict) and
// errors.As(err, **ConflictError) still work); when ctx ends while waiting it
// returns context.Cause(ctx) joined with the last error. Inside a database
// transaction a serialization failure aborts the whole transaction, so fn
// must begin and commit it.
func RetryOnConflict(ctx context.Context, fn func(ctx context.Context) error, opts ...Option) error {
	o := newOptions(opts)
	if o.hasID {
		return fmt.Errorf("%w: RetryOnConflict takes no WithID: give it to the writes inside fn", ErrInvalid)
	}
	if o.tel == nil {
		o.tel = noTelemetry
	}
	_, err := retry(ctx, o, fn)
	return err
}

// retry runs the loop of RetryOnConflict and Update, and returns how many
// attempts it made.
func retry(ctx context.Context, o options, fn func(ctx context.Context) error) (attempts int, err error) {
	steps := max(o.backoff.Steps, 1)
	sched := newSchedule(o.backoff)
	var last error
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return attempt - 1, context.Cause(ctx)
			}
			return attempt - 1, fmt.Errorf("occ: %w (last error: %w)", context.Cause(ctx), last)
		}
		last = fn(ctx)
		o.tel.attempted(ctx, last)
		if last == nil || !IsRetryable(last) {
			return attempt, last
		}
		if attempt >= steps {
			o.tel.giveUps.Add(ctx, 1)
			return attempt, fmt.Errorf("occ: gave up after %d attempts: %w", attempt, last)
		}
		if o.onRetry != nil {
			o.onRetry(attempt, last)
		}
		if d := sched.next(); d > 0 {
			o.tel.retried(ctx, d)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return attempt, fmt.Errorf("occ: %w (last error: %w)", context.Cause(ctx), last)
			case <-t.C:
			}
		}
	}
}

// schedule yields the delays of a Backoff, one per retry. The delay grows
// in float64 and is clamped before it becomes a Duration: converting a value
// past int64 wraps to a negative delay, which would retry with no pause.
type schedule struct {
	b     Backoff
	delay time.Duration
}

func newSchedule(b Backoff) *schedule {
	return &schedule{b: b, delay: b.capped(b.Duration)}
}

// next returns the delay before the next retry: never more than Cap, and
// never wrapped below zero however many steps came before.
func (s *schedule) next() time.Duration {
	d := s.delay
	if s.b.Jitter > 0 { // false for NaN
		d = s.b.capped(toDuration(float64(d) * (1 + rand.Float64()*s.b.Jitter)))
	}
	factor := s.b.Factor
	if !(factor > 1) { // below 1, or NaN
		factor = 1
	}
	s.delay = s.b.capped(toDuration(float64(s.delay) * factor))
	return d
}

func (b Backoff) capped(d time.Duration) time.Duration {
	if b.Cap > 0 {
		return min(d, b.Cap)
	}
	return d
}

// toDuration converts f nanoseconds, saturating at the longest Duration; NaN
// and values ≤ 0 are no delay.
func toDuration(f float64) time.Duration {
	switch {
	case !(f > 0):
		return 0
	case f >= math.MaxInt64: // float64(MaxInt64) is 2^63, itself out of range
		return math.MaxInt64
	}
	return time.Duration(f)
}

// Option adjusts one call: of Update or RetryOnConflict (WithBackoff,
// OnRetry, WithMeterProvider), or of a write (WithID, which Update passes on
// to its write). A Store's writes ignore the options of the retry loop.
type Option func(*options)

type options struct {
	backoff Backoff
	onRetry func(int, error)
	tel     *occTelemetry // nil: the store's, or none
	id      uuid.UUID     // WithID
	hasID   bool
}

func newOptions(opts []Option) options {
	o := options{backoff: DefaultRetry}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// WithBackoff makes the call retry as b says. Defaults to DefaultRetry.
func WithBackoff(b Backoff) Option { return func(o *options) { o.backoff = b } }

// OnRetry makes the call run fn before each retry, with the number of the
// attempt that failed (1 for the first) and its error: a hook for counting
// conflicts and retries. fn runs on the caller's goroutine. Defaults to none.
func OnRetry(fn func(attempt int, err error)) Option { return func(o *options) { o.onRetry = fn } }

// mutateError carries an error of the caller's mutate function through the
// retry loop, which must not retry it.
type mutateError struct{ err error }

func (e mutateError) Error() string { return e.err.Error() }

// Update is the retrying read-modify-write: it loads the row with key, calls
// mutate on it, and writes it back if nobody wrote in between, re-reading and
// calling mutate again on a conflict (as RetryOnConflict, with the same
// options). It returns the new version.
//
// mutate may be called several times, each time on a freshly loaded row; it
// must not change the key (ErrInvalid), and changes it makes to the version
// field are ignored. An error from mutate ends Update with that error and
// nothing written. ErrNotFound is not retried. When s runs in the caller's
// transaction (Postgres.WithDB), a serialization failure aborts that whole
// transaction: retry the transaction with RetryOnConflict instead.
//
// With WithID, the write that applies is recorded with its ID, and a call
// with a recorded ID returns the version it recorded without calling
// mutate: after a lost answer, call Update again with the same ID. On this
// package's stores the ID is checked in the load's round trip (a pipelined
// batch), so that a replay costs one round trip and answers even when the
// row has since been deleted.
func Update[K comparable, T any](ctx context.Context, s Store[K, T], key K, mutate func(row *T) error, opts ...Option) (int64, error) {
	if mutate == nil {
		return 0, fmt.Errorf("%w: nil mutate function", ErrInvalid)
	}
	m := layoutOf(s)
	o := newOptions(opts)
	var write []Option // what the write takes: the ID alone
	if o.hasID {
		if _, err := validID(o.id); err != nil {
			return 0, err
		}
		write = []Option{WithID(o.id)}
	}
	tracer := noTelemetry
	if m != nil {
		tracer = m.tel
	}
	if o.tel == nil {
		o.tel = tracer
	}
	ctx, span := tracer.spanStart(ctx, "occ.Update")
	var version int64
	attempts, err := retry(ctx, o, func(ctx context.Context) error {
		row, v, err := load(ctx, s, key, o)
		if r, ok := errors.AsType[replayed](err); ok {
			version = r.version
			return nil
		}
		if err != nil {
			return err
		}
		if err := mutate(&row); err != nil {
			return mutateError{err}
		}
		if m != nil && m.keyOf(reflect.ValueOf(row)) != key {
			return fmt.Errorf("%w: mutate changed the key of row %s", ErrInvalid, m.quote(key))
		}
		failpoint.Inject(ctx, "occ.update.before-write")
		version, err = s.Update(ctx, row, v, write...)
		return err
	})
	if span.Recording() {
		span.Set(attribute.Int(telemetry.Attempt, attempts))
	}
	if me := (mutateError{}); errors.As(err, &me) {
		err = me.err
	}
	span.End(err)
	if err != nil {
		return 0, err
	}
	return version, nil
}

// load is Update's read: with an ID on this package's stores, the read that
// also answers whether the ID is recorded (a replayed error).
func load[K comparable, T any](ctx context.Context, s Store[K, T], key K, o options) (T, int64, error) {
	if l, ok := s.(idLoader[K, T]); ok && o.hasID {
		return l.loadID(ctx, key, o)
	}
	return s.Load(ctx, key)
}

// laidOut is implemented by this package's stores: it tells Update which
// field is the key, so that a mutate that changes it is caught.
type laidOut[K comparable] interface{ layout() *mapping[K] }

// layoutOf returns s's mapping, or nil for another implementation of Store,
// whose Update then decides.
func layoutOf[K comparable, T any](s Store[K, T]) *mapping[K] {
	if l, ok := s.(laidOut[K]); ok {
		return l.layout()
	}
	return nil
}
