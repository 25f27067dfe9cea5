// Package occ does optimistic concurrency control on a user's own table: every
// row carries a version, and a write names the version it was computed from.
//
// Guarantee: a write succeeds only if the row still has the version the writer
// read, in the same statement that bumps it
// (UPDATE … SET …, version = version + 1 WHERE key = $k AND version = $v), so a
// writer that paused between its read and its write — for any length of time,
// with no lease to expire — gets a *ConflictError instead of overwriting a
// newer row. [Update] re-reads and re-applies the caller's change on a
// conflict, so concurrent read-modify-writes of one row never lose an update.
// Conflicts are never reported as not-found, and a deleted row is [ErrNotFound],
// not a conflict.
//
// What it does NOT protect: only writes that go through a version check. A
// plain UPDATE elsewhere in the program bypasses it (give it the version
// predicate too, or bump the version there). It excludes nothing: side effects
// done between the read and the write (an e-mail, a call to another service)
// happen once per attempt, including attempts that then conflict. Versions
// restart at 1 after Delete and Insert of the same key, so a client holding
// version 1 of the old row matches the new one; use a soft delete if clients
// keep versions across deletions. On one hot row OCC wastes attempts (see the
// package benchmarks); many keys with low contention are where it wins. A
// write whose answer is lost may have applied: retried without an operation
// ID, Update applies the change again on the row it wrote. Give it one
// ([WithID]): the retry returns the recorded version instead, and
// [Recorder.Resolve] tells whether it applied.
//
//	accounts, err := occ.NewPostgres[string, Account](pool, "accounts", nil)
//	v, err := occ.Update(ctx, accounts, "alice", func(a *Account) error {
//		a.Balance -= 30 // runs again on a fresh row after a conflict
//		return nil
//	})
//
// Two backends implement [Store]: [Postgres] on any table with a version
// column, and [Memory] for tests and single-process programs. [Fenced] is the
// same read-modify-write done with a fenced lease lock, for comparison.
// [ETag], [ParseIfMatch], [CheckIfMatch] and [RequireIfMatch] carry versions
// over HTTP (If-Match → 412 Precondition Failed / 428 Precondition Required).
package occ

import (
	"context"
	"errors"
	"fmt"

	"github.com/lockfree-go/lockfree/internal/short"
)

var (
	// ErrConflict reports a write whose expected version is not the row's;
	// the error is a *ConflictError.
	ErrConflict = errors.New("occ: version conflict")
	// ErrNotFound reports a row that does not exist (or no longer does).
	ErrNotFound = errors.New("occ: row not found")
	// ErrInvalid reports bad input or configuration, detected before anything
	// was written.
	ErrInvalid = errors.New("occ: invalid argument")
	// ErrAborted reports a transaction the database aborted with a
	// serialization failure (SQLSTATE 40001) or a deadlock (40P01); the
	// error also wraps the *pgconn.PgError. It is retryable, like a conflict.
	ErrAborted = errors.New("occ: transaction aborted (serialization failure or deadlock)")
)

// MaxKeyLen is the longest key of a string type, in bytes. Such keys must
// also be non-empty, valid UTF-8 and free of NUL bytes, which PostgreSQL text
// cannot hold.
const MaxKeyLen = 255

// ConflictError is a write rejected because the row's version is not the one
// the writer expected. Expected is 0 for an Insert of a key that exists.
// Actual is the row's version when the conflict was detected (always ≥ 1: a
// missing row is ErrNotFound, never a conflict). Key is the row's key as
// text: a string key as it is, an integer in decimal, another type as %v
// formats it.
type ConflictError struct {
	Key      string
	Expected int64
	Actual   int64
}

func (e *ConflictError) Error() string {
	if e.Expected == 0 {
		return fmt.Sprintf("occ: version conflict on key %s: row exists at version %d", short.Quote(e.Key), e.Actual)
	}
	return fmt.Sprintf("occ: version conflict on key %s: expected version %d, row is at %d", short.Quote(e.Key), e.Expected, e.Actual)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Store keeps versioned rows of type T, a struct whose db-tagged fields are
// the table's columns, identified by keys of type K, the type of T's key
// field. Implementations are safe for concurrent use. A write given WithID
// is recorded with its outcome when it applies, and a retry with the ID
// returns that outcome instead of writing again (Recorder); the other
// options are Update's and RetryOnConflict's, and a write ignores them.
type Store[K comparable, T any] interface {
	// Load returns the row with key and its version (also set in the
	// row's version field), or ErrNotFound.
	Load(ctx context.Context, key K) (T, int64, error)
	// Insert adds row (its key taken from its key field, its version
	// field ignored) at version 1 and returns 1. If the key exists it
	// returns a *ConflictError with Expected 0 and changes nothing.
	Insert(ctx context.Context, row T, opts ...Option) (int64, error)
	// Update writes every column of row (key from its key field) if the
	// stored row is at version, and returns the new version, version+1.
	// The row's version field is ignored. It returns a *ConflictError when
	// the row is at another version and ErrNotFound when it does not exist.
	Update(ctx context.Context, row T, version int64, opts ...Option) (int64, error)
	// Delete removes the row with key if it is at version; otherwise it
	// returns a *ConflictError, or ErrNotFound when there is no such row.
	Delete(ctx context.Context, key K, version int64, opts ...Option) error
}

func validVersion(v int64) error {
	if v < 1 {
		return fmt.Errorf("%w: version %d (versions start at 1)", ErrInvalid, v)
	}
	return nil
}
