package occ

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/opid"
	"github.com/lockfree-go/lockfree/internal/short"
)

var (
	// ErrIDReused reports an operation ID presented with another
	// operation or key than the one it was recorded with; the error is an
	// *IDReusedError. Nothing was written.
	ErrIDReused = errors.New("occ: operation ID reused with another operation")
	// ErrExpired reports an operation ID older than the store's Retention:
	// its record may be purged, so the store can neither apply the write
	// nor tell whether it applied. Nothing was written.
	ErrExpired = errors.New("occ: operation ID expired")
	// ErrAbandoned is the recorded outcome of an ID that Resolve found
	// unrecorded: the write did not apply, and no write with the ID ever
	// will; every later write with it returns this error.
	ErrAbandoned = errors.New("occ: operation abandoned")
)

// IDReusedError is a write refused because its ID was recorded for another
// one. It matches ErrIDReused.
type IDReusedError struct {
	ID uuid.UUID
	// Op is the refused write ("insert", "update", "delete"; "resolve"
	// for Resolve); Recorded the one the ID was recorded for, "" when
	// another store recorded it (a store that shares the operations
	// table, whose records it neither replays nor tells).
	Op, Recorded string
}

func (e *IDReusedError) Error() string {
	if e.Recorded == "" {
		return fmt.Sprintf("occ: %s with operation ID %s: the ID was recorded by another store", e.Op, e.ID)
	}
	return fmt.Sprintf("occ: %s with operation ID %s: the ID was recorded for another operation (%s)", e.Op, e.ID, short.Quote(e.Recorded))
}

// Is reports whether target is ErrIDReused.
func (e *IDReusedError) Is(target error) bool { return target == ErrIDReused }

// The operations, as Outcome.Op and IDReusedError name them.
const (
	OpInsert = "insert"
	OpUpdate = "update"
	OpDelete = "delete"
)

// WithID gives a write an ID, a UUIDv7 that the caller mints once per
// intent (uuid.NewV7) and keeps until it knows the outcome. Update (the
// helper) and the Store's Insert, Update and Delete take it; RetryOnConflict
// refuses it (ErrInvalid): pass it to the writes inside fn instead.
//
// The store records the ID with the write that applied, in the write's own
// statement, so that the record commits with the row or not at all; a write
// with a recorded ID returns the recorded version instead of writing again.
// Refusals are not recorded: a conflict or a missing row means nothing was
// written, so a retry with the ID re-reads and writes (that is what Update
// does on a conflict). After a lost answer, retry with the same ID, or ask
// Resolve.
//
// The ID names one write of one row: the same ID with another operation or
// key is an *IDReusedError, but the row's contents and the version it was
// computed from are not compared (Update recomputes them on every attempt).
// It must be a UUIDv7 (ErrInvalid otherwise): its time bounds its use to the
// store's Retention (ErrExpired after it).
func WithID(id uuid.UUID) Option { return func(o *options) { o.id, o.hasID = id, true } }

// OperationID returns the ID opts carry (WithID), for implementations of
// Store; ok is false when they carry none.
func OperationID(opts ...Option) (id uuid.UUID, ok bool) {
	o := newOptions(opts)
	return o.id, o.hasID
}

// Outcome is what a write with an ID did, as its store recorded it.
type Outcome struct {
	ID uuid.UUID
	// Op is OpInsert, OpUpdate or OpDelete; "" for an abandoned ID.
	Op string
	// Key is the row's key as text, as ConflictError.Key.
	Key string
	// Version is the version the write left: 1 for an insert, the new
	// version for an update, the version deleted for a delete.
	Version int64
	// Err is ErrAbandoned for an ID that Resolve recorded, nil for a
	// write that applied.
	Err error
}

// Recorder is a Store that records the writes that carry an ID: *Postgres
// and *Memory.
type Recorder[K comparable, T any] interface {
	Store[K, T]
	// Resolve returns the recorded outcome of the write with id: did it
	// apply, and with what version. When nothing is recorded, the write
	// has not applied; Resolve then records id as abandoned, so that the
	// write, still on its way, can no longer apply, and returns an Outcome
	// whose Err is ErrAbandoned. It returns ErrExpired for an ID older than
	// the store's Retention, ErrInvalid for one that is not a UUIDv7, and
	// an *IDReusedError for one that another store sharing the operations
	// table recorded (Postgres: a table in another schema, or of another
	// name), whose outcome it does not tell.
	Resolve(ctx context.Context, id uuid.UUID) (Outcome, error)
	// Purge deletes up to limit (≥ 1) records of IDs older than the
	// store's Retention, which no write may use any more, and returns how
	// many it deleted; call it until it returns less than limit.
	Purge(ctx context.Context, limit int) (int, error)
}

// The recorded outcomes, as the operations tables hold them.
const (
	recApplied   = "applied"
	recAbandoned = "abandoned"
)

// record is one ID's recorded outcome.
type record struct {
	fingerprint []byte
	op, key     string
	outcome     string
	version     int64
	minted      time.Time // the ID's time (Memory's purge)
}

func (r record) result(id uuid.UUID) Outcome {
	o := Outcome{ID: id, Op: r.op, Key: r.key, Version: r.version}
	if r.outcome != recApplied {
		o = Outcome{ID: id, Err: fmt.Errorf("%w: %s", ErrAbandoned, id)}
	}
	return o
}

// call is one write with an ID.
type call struct {
	id          uuid.UUID
	minted      time.Time
	op, key     string // key as text
	fingerprint []byte
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

// newCall validates o's ID for op on the key whose text is key and whose
// unambiguous text is ukey; ok is false when there is none. where names the
// store (its table), so that an ID recorded on one table is not replayed
// on another.
func newCall(o options, where, op, key, ukey string) (c call, ok bool, err error) {
	if !o.hasID {
		return call{}, false, nil
	}
	minted, err := validID(o.id)
	if err != nil {
		return call{}, true, err
	}
	return call{id: o.id, minted: minted, op: op, key: key, fingerprint: opid.Fingerprint("occ", where, op, ukey)}, true, nil
}

// replay returns the recorded outcome r for c: an *IDReusedError when c is
// another write than the one recorded, ErrAbandoned for an abandoned ID.
func (c call) replay(r record, mutant bool) (int64, error) {
	out := r.result(c.id)
	if out.Err != nil {
		return 0, out.Err
	}
	if !bytes.Equal(r.fingerprint, c.fingerprint) && !mutant {
		return 0, &IDReusedError{ID: c.id, Op: c.op, Recorded: r.op}
	}
	return out.Version, nil
}

// ageError is the refusal of an ID whose time is not Live.
func ageError(id uuid.UUID, age opid.Age) error {
	if age == opid.Future {
		return fmt.Errorf("%w: operation ID %s is dated more than the store's Retention ahead of its clock", ErrInvalid, id)
	}
	return fmt.Errorf("%w: %s", ErrExpired, id)
}

func validLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: purge limit %d must be ≥ 1", ErrInvalid, limit)
	}
	return nil
}

func isUniqueViolation(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23505"
}

// replayed is an error carrying the outcome of a write with an ID answered
// from its record by the load of Update: Update returns its version
// without calling mutate.
type replayed struct{ version int64 }

func (replayed) Error() string { return "occ: replayed" }

// idLoader is implemented by this package's stores: the load of Update
// that also answers whether the write's ID is recorded.
type idLoader[K comparable, T any] interface {
	loadID(ctx context.Context, key K, o options) (T, int64, error)
}
