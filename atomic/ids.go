package atomic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/internal/short"
)

var (
	// ErrIDReused reports an operation ID presented with another operation,
	// key or arguments than the ones it was recorded with; the error is an
	// *IDReusedError. Nothing was written.
	ErrIDReused = errors.New("atomic: operation ID reused with another operation")
	// ErrExpired reports an operation ID older than the store's Retention:
	// its record may be purged, so the store can neither apply the
	// operation nor tell whether it applied. Nothing was written.
	ErrExpired = errors.New("atomic: operation ID expired")
	// ErrAbandoned is the recorded outcome of an ID that Resolve found
	// unrecorded: the operation did not apply, and no operation with the ID
	// ever will; every later operation with it returns this error.
	ErrAbandoned = errors.New("atomic: operation abandoned")
)

// IDReusedError is an operation refused because its ID was recorded for
// another one. It matches ErrIDReused.
type IDReusedError struct {
	ID uuid.UUID
	// Op is the refused operation ("resolve" for Resolve); Recorded the
	// one the ID was recorded for, "" when another store recorded it (a
	// store that shares the operations table, whose records it neither
	// replays nor tells).
	Op, Recorded string
}

func (e *IDReusedError) Error() string {
	if e.Recorded == "" {
		return fmt.Sprintf("atomic: %s with operation ID %s: the ID was recorded by another store", e.Op, e.ID)
	}
	return fmt.Sprintf("atomic: %s with operation ID %s: the ID was recorded for another operation (%s)", e.Op, e.ID, short.Quote(e.Recorded))
}

// Is reports whether target is ErrIDReused.
func (e *IDReusedError) Is(target error) bool { return target == ErrIDReused }

// Option adjusts one operation of a Store. WithID is the only one.
type Option func(*options)

type options struct {
	id  uuid.UUID
	set bool
}

// WithID gives the operation an ID, a UUIDv7 that the caller mints once
// per intent (uuid.NewV7) and keeps until it knows the outcome. The store
// records the ID with the operation's outcome in the operation's own
// statement, so that the record commits with the effect or not at all; an
// operation with a recorded ID returns the recorded outcome — the value it
// left, or the same refusal with the value then — instead of applying
// again. After a lost answer, retry with the same ID, or ask Resolve.
//
// The ID must be a UUIDv7 (ErrInvalid otherwise): the time it carries
// bounds its use to the store's Retention (ErrExpired after it). The same ID
// with another operation, key or arguments is an *IDReusedError. Without
// WithID an operation is what it always was: nothing is recorded.
func WithID(id uuid.UUID) Option { return func(o *options) { o.id, o.set = id, true } }

// OperationID returns the ID opts carry (WithID), for implementations of
// Store; ok is false when they carry none.
func OperationID(opts ...Option) (id uuid.UUID, ok bool) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o.id, o.set
}

// Outcome is what an operation with an ID did, as its store recorded it.
type Outcome struct {
	ID uuid.UUID
	// Op is the operation (OpDecrement, …); "" for an abandoned ID.
	Op string
	// Key is the operation's key; for DecrementMany, the key its refusal
	// names, "" when it applied.
	Key string
	// Value is the value the operation left when it applied: the new
	// value, the value set, the value claimed.
	Value int64
	// Values are DecrementMany's new values when it applied.
	Values map[string]int64
	// Err is why the operation did not apply: the *InsufficientError,
	// *ConflictError or ErrNotFound it returned (ErrInvalid for an
	// increment that would overflow), with the value the store held then;
	// ErrAbandoned for an ID that Resolve recorded. Nil when it applied.
	Err error
}

// Recorder is a Store that records the outcome of each operation that
// carries an ID: *Postgres and *Memory. Fenced records none; an operation
// WithID is ErrInvalid there.
type Recorder interface {
	Store
	// Resolve returns the recorded outcome of the operation with id: did
	// it apply, and with what result. When nothing is recorded, the
	// operation has not applied; Resolve then records id as abandoned, so
	// that the operation, still on its way, can no longer apply, and
	// returns an Outcome whose Err is ErrAbandoned. It returns ErrExpired
	// for an ID older than the store's Retention, ErrInvalid for one
	// that is not a UUIDv7, and an *IDReusedError for one that another
	// store sharing the operations table recorded (Postgres: a table in
	// another schema, or of another name), whose outcome it does not tell.
	Resolve(ctx context.Context, id uuid.UUID) (Outcome, error)
	// Purge deletes up to limit (≥ 1) records of IDs older than the
	// store's Retention, which no operation may use any more, and returns
	// how many it deleted; call it until it returns less than limit.
	Purge(ctx context.Context, limit int) (int, error)
}

// The recorded outcomes, as the operations tables hold them.
const (
	recApplied      = "applied"
	recInsufficient = "insufficient"
	recConflict     = "conflict"
	recNotFound     = "not_found"
	recAbandoned    = "abandoned"
)

// record is one ID's recorded outcome. value is what the operation left
// (applied) or the value that refused it; amount is the operation's amount
// (decrements and increments) or compared value (compare-and-set,
// set-if-greater, claim), bound its floor or cap.
type record struct {
	fingerprint   []byte
	op, key       string
	outcome       string
	value         int64
	amount, bound int64
	keys          []string  // DecrementMany applied: its keys, in key order
	vals          []int64   // and their new values
	minted        time.Time // the ID's time (Memory's purge)
}

// result rebuilds the outcome the record stands for.
func (r record) result(id uuid.UUID) Outcome {
	o := Outcome{ID: id, Op: r.op, Key: r.key, Value: r.value}
	switch r.outcome {
	case recApplied:
		if r.op == OpDecrementMany {
			o.Key, o.Value = "", 0
			o.Values = make(map[string]int64, len(r.keys))
			for i, k := range r.keys {
				o.Values[k] = r.vals[i]
			}
		}
	case recInsufficient:
		if r.op == OpIncrement {
			o.Err = incrementMiss(r.key, r.amount, r.bound, r.value)
		} else {
			o.Err = &InsufficientError{Op: r.op, Key: r.key, Actual: r.value, Amount: r.amount, Bound: r.bound}
		}
	case recConflict:
		o.Err = &ConflictError{Op: r.op, Key: r.key, Expected: r.amount, Actual: r.value}
	case recNotFound:
		o.Err = notFound(r.key)
	default:
		o.Err = fmt.Errorf("%w: %s", ErrAbandoned, id)
	}
	if o.Err != nil {
		o.Value = 0
	}
	return o
}

// recordOf is the record of an operation decided in Go (Memory): err is
// its decision's refusal at value v, or nil when it left v.
func recordOf(c call, v int64, err error) record {
	r := record{fingerprint: c.fingerprint, op: c.op, key: c.key, value: v, amount: c.amount, bound: c.bound, outcome: recApplied}
	var ce *ConflictError
	switch {
	case err == nil:
	case errors.As(err, &ce):
		r.outcome = recConflict
	default: // an *InsufficientError, or an increment's overflow
		r.outcome = recInsufficient
	}
	return r
}

// call is one operation with an ID: what it is, and what its record must
// match.
type call struct {
	id            uuid.UUID
	minted        time.Time
	op, key       string
	amount, bound int64
	fingerprint   []byte
}

// validID returns the time id carries, or ErrInvalid for an ID that is not
// a UUIDv7.
func validID(id uuid.UUID) (time.Time, error) {
	minted, err := opid.Minted(id)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return minted, nil
}

// isUniqueViolation reports SQLSTATE 23505.
func isUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505"
}

// newCall validates opts' ID; ok is false when there is none. args are the
// operation's arguments after key, in its signature's order; where names
// the store (its table), so that an ID recorded on one table is not
// replayed on another.
func newCall(opts []Option, where, op, key string, amount, bound int64, args ...int64) (c call, ok bool, err error) {
	id, ok := OperationID(opts...)
	if !ok {
		return call{}, false, nil
	}
	minted, err := validID(id)
	if err != nil {
		return call{}, true, err
	}
	parts := []string{"atomic", where, op, key}
	for _, a := range args {
		parts = append(parts, strconv.FormatInt(a, 10))
	}
	return call{id: id, minted: minted, op: op, key: key, amount: amount, bound: bound, fingerprint: opid.Fingerprint(parts...)}, true, nil
}

// manyFingerprint extends a batch's call with its keys and amounts.
func manyFingerprint(where string, b batch) []byte {
	parts := []string{"atomic", where, OpDecrementMany}
	for i, k := range b.keys {
		parts = append(parts, k, strconv.FormatInt(b.amounts[i], 10))
	}
	return opid.Fingerprint(parts...)
}

// replay returns the recorded outcome r for c: an *IDReusedError when c is
// another operation than the one recorded.
func (c call) replay(r record, mutant bool) (Outcome, error) {
	if r.outcome == recAbandoned {
		return r.result(c.id), nil
	}
	if !bytes.Equal(r.fingerprint, c.fingerprint) && !mutant {
		return Outcome{}, &IDReusedError{ID: c.id, Op: c.op, Recorded: r.op}
	}
	return r.result(c.id), nil
}

// ageError is the refusal of an ID whose time is not Live.
func ageError(id uuid.UUID, age opid.Age) error {
	if age == opid.Future {
		return fmt.Errorf("%w: operation ID %s is dated more than the store's Retention ahead of its clock", ErrInvalid, id)
	}
	return fmt.Errorf("%w: %s", ErrExpired, id)
}

// validRetention checks a configured Retention, 0 meaning the default.
func validRetention(r time.Duration) error {
	if r != 0 && r < opid.MinRetention {
		return fmt.Errorf("%w: Retention %v must be ≥ %v", ErrInvalid, r, opid.MinRetention)
	}
	return nil
}

func retentionOr(r time.Duration) time.Duration {
	if r == 0 {
		return opid.DefaultRetention
	}
	return r
}

func validLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: purge limit %d must be ≥ 1", ErrInvalid, limit)
	}
	return nil
}
