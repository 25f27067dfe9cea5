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
// package benchmarks); many keys with low contention are where it wins.
//
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
	"reflect"
	"strings"
	"unicode/utf8"

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

// MaxKeyLen is the longest string key, in bytes. String keys must also be
// non-empty, valid UTF-8 and free of NUL bytes, which PostgreSQL text cannot
// hold.
const MaxKeyLen = 255

// ConflictError is a write rejected because the row's version is not the one
// the writer expected. Expected is 0 for an Insert of a key that exists.
// Actual is the row's version when the conflict was detected (always ≥ 1: a
// missing row is ErrNotFound, never a conflict).
type ConflictError struct {
	Key      any
	Expected int64
	Actual   int64
}

func (e *ConflictError) Error() string {
	if e.Expected == 0 {
		return fmt.Sprintf("occ: version conflict on key %s: row exists at version %d", quoteKey(e.Key), e.Actual)
	}
	return fmt.Sprintf("occ: version conflict on key %s: expected version %d, row is at %d", quoteKey(e.Key), e.Expected, e.Actual)
}

// Is reports whether target is ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// Store keeps versioned rows of type T, a struct whose db-tagged fields are
// the table's columns. Implementations are safe for concurrent use. Keys are
// passed as the key field's type (or, for integer and string keys, a value of
// the same kind that converts without loss).
type Store[T any] interface {
	// Load returns the row with key and its version (also set in the
	// row's version field), or ErrNotFound.
	Load(ctx context.Context, key any) (T, int64, error)
	// Insert adds row (its key taken from its key field, its version
	// field ignored) at version 1 and returns 1. If the key exists it
	// returns a *ConflictError with Expected 0 and changes nothing.
	Insert(ctx context.Context, row T) (int64, error)
	// Update writes every column of row (key from its key field) if the
	// stored row is at version, and returns the new version, version+1.
	// The row's version field is ignored. It returns a *ConflictError when
	// the row is at another version and ErrNotFound when it does not exist.
	Update(ctx context.Context, row T, version int64) (int64, error)
	// Delete removes the row with key if it is at version; otherwise it
	// returns a *ConflictError, or ErrNotFound when there is no such row.
	Delete(ctx context.Context, key any, version int64) error
}

// TableConfig maps a struct type onto a table. Columns are the struct's
// fields with a `db:"column"` tag (fields of embedded structs included;
// untagged fields and `db:"-"` are ignored); they are found by reflection
// once, when the store is constructed, which is also when a bad mapping is
// reported (an ErrInvalid). TableConfig is a value, safe to copy.
type TableConfig struct {
	// Schema qualifies Table when set. Defaults to the connection's
	// search_path. Ignored by Memory.
	Schema string
	// Table is the user's table. Required by Postgres; ignored by Memory.
	Table string
	// Key is the column that identifies a row: the primary key or a
	// unique column (Insert relies on ON CONFLICT over it). Its field must
	// be of a comparable type. Defaults to "id".
	Key string
	// Version is the bigint column holding the row version (NOT NULL,
	// starting at 1); its field must be a signed integer. Defaults to
	// "version".
	Version string
}

func (c TableConfig) withDefaults() TableConfig {
	if c.Key == "" {
		c.Key = "id"
	}
	if c.Version == "" {
		c.Version = "version"
	}
	return c
}

// maxIdentifier is PostgreSQL's NAMEDATALEN-1: longer names are truncated
// silently by the server.
const maxIdentifier = 63

func validIdent(what, s string, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("%w: invalid config: empty %s", ErrInvalid, what)
	case len(s) > maxIdentifier:
		return fmt.Errorf("%w: invalid config: %s %q is longer than %d bytes", ErrInvalid, what, s, maxIdentifier)
	case !utf8.ValidString(s) || strings.ContainsRune(s, 0):
		return fmt.Errorf("%w: invalid config: %s %q is not a valid identifier", ErrInvalid, what, s)
	}
	return nil
}

// column is one db-tagged field.
type column struct {
	name  string
	index []int
}

// mapping is the struct layout of T, found once at construction.
type mapping struct {
	typ     reflect.Type
	cols    []column // in field order
	key     int      // index into cols
	version int      // index into cols
	keyKind reflect.Kind
}

func newMapping[T any](cfg TableConfig) (*mapping, error) {
	cfg = cfg.withDefaults()
	if err := validIdent("key column", cfg.Key, true); err != nil {
		return nil, err
	}
	if err := validIdent("version column", cfg.Version, true); err != nil {
		return nil, err
	}
	if cfg.Key == cfg.Version {
		return nil, fmt.Errorf("%w: invalid config: key and version are both column %q", ErrInvalid, cfg.Key)
	}
	typ := reflect.TypeFor[T]()
	if typ.Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: invalid config: %v is not a struct", ErrInvalid, typ)
	}
	m := &mapping{typ: typ, key: -1, version: -1}
	if err := m.collect(typ, nil, map[string]bool{}); err != nil {
		return nil, err
	}
	for i, c := range m.cols {
		switch c.name {
		case cfg.Key:
			m.key = i
		case cfg.Version:
			m.version = i
		}
	}
	if m.key < 0 {
		return nil, fmt.Errorf("%w: invalid config: %v has no field tagged db:%q (the key column)", ErrInvalid, typ, cfg.Key)
	}
	if m.version < 0 {
		return nil, fmt.Errorf("%w: invalid config: %v has no field tagged db:%q (the version column)", ErrInvalid, typ, cfg.Version)
	}
	kt := typ.FieldByIndex(m.cols[m.key].index).Type
	if !kt.Comparable() || kt.Kind() == reflect.Interface || kt.Kind() == reflect.Pointer {
		return nil, fmt.Errorf("%w: invalid config: key field of type %v is not a comparable value", ErrInvalid, kt)
	}
	m.keyKind = kt.Kind()
	switch typ.FieldByIndex(m.cols[m.version].index).Type.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
	default:
		return nil, fmt.Errorf("%w: invalid config: version field of %v must be int, int32 or int64", ErrInvalid, typ)
	}
	return m, nil
}

func (m *mapping) collect(typ reflect.Type, prefix []int, seen map[string]bool) error {
	for i := range typ.NumField() {
		f := typ.Field(i)
		index := append(append([]int(nil), prefix...), i)
		tag, tagged := f.Tag.Lookup("db")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if !tagged || name == "" {
			if f.Anonymous && f.Type.Kind() == reflect.Struct {
				if err := m.collect(f.Type, index, seen); err != nil {
					return err
				}
			}
			continue
		}
		if !f.IsExported() {
			return fmt.Errorf("%w: invalid config: field %s of %v is tagged but unexported", ErrInvalid, f.Name, m.typ)
		}
		if err := validIdent("column", name, true); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("%w: invalid config: column %q appears twice in %v", ErrInvalid, name, m.typ)
		}
		seen[name] = true
		m.cols = append(m.cols, column{name: name, index: index})
	}
	return nil
}

// keyOf returns the key field of row (a struct value of m.typ).
func (m *mapping) keyOf(row reflect.Value) any {
	return row.FieldByIndex(m.cols[m.key].index).Interface()
}

func (m *mapping) setVersion(row reflect.Value, v int64) {
	row.FieldByIndex(m.cols[m.version].index).SetInt(v)
}

// normKey converts key to the key field's type and checks it, or reports
// ErrInvalid.
func (m *mapping) normKey(key any) (any, error) {
	k, err := m.convertKey(key)
	if err != nil {
		return nil, err
	}
	return k, m.checkKey(k)
}

// rowKey returns the key field of row (a struct value of m.typ), checked.
func (m *mapping) rowKey(row reflect.Value) (any, error) {
	k := m.keyOf(row)
	return k, m.checkKey(k)
}

// checkKey rejects a string key that PostgreSQL text cannot hold (NUL,
// invalid UTF-8: SQLSTATE 22021) or that no caller means (empty, longer
// than MaxKeyLen), so that both backends refuse it before any statement.
func (m *mapping) checkKey(k any) error {
	if m.keyKind != reflect.String {
		return nil
	}
	s := reflect.ValueOf(k).String()
	switch {
	case s == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case len(s) > MaxKeyLen:
		return fmt.Errorf("%w: key %s is %d bytes, longer than %d", ErrInvalid, short.Quote(s), len(s), MaxKeyLen)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: key %s is not valid UTF-8", ErrInvalid, short.Quote(s))
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: key %s contains a NUL byte", ErrInvalid, short.Quote(s))
	}
	return nil
}

// quoteKey formats a key for an error message: strings quoted and
// shortened (internal/short), other keys as %v, shortened when long.
func quoteKey(k any) string {
	if v := reflect.ValueOf(k); v.Kind() == reflect.String {
		return short.Quote(v.String())
	}
	if s := fmt.Sprint(k); len(s) <= short.Max {
		return s
	} else {
		return short.Quote(s)
	}
}

// convertKey converts key to the key field's type, or reports ErrInvalid.
func (m *mapping) convertKey(key any) (any, error) {
	if key == nil {
		return nil, fmt.Errorf("%w: nil key", ErrInvalid)
	}
	kt := m.typ.FieldByIndex(m.cols[m.key].index).Type
	v := reflect.ValueOf(key)
	if v.Type() == kt {
		return key, nil
	}
	switch {
	case v.CanInt() && kt.Kind() >= reflect.Int && kt.Kind() <= reflect.Int64:
		out := reflect.New(kt).Elem()
		if out.OverflowInt(v.Int()) {
			break
		}
		out.SetInt(v.Int())
		return out.Interface(), nil
	case v.CanInt() && kt.Kind() >= reflect.Uint && kt.Kind() <= reflect.Uint64:
		out := reflect.New(kt).Elem()
		if v.Int() < 0 || out.OverflowUint(uint64(v.Int())) {
			break
		}
		out.SetUint(uint64(v.Int()))
		return out.Interface(), nil
	case v.CanUint() && kt.Kind() >= reflect.Int && kt.Kind() <= reflect.Uint64:
		out := reflect.New(kt).Elem()
		if out.CanInt() {
			if v.Uint() > 1<<63-1 || out.OverflowInt(int64(v.Uint())) {
				break
			}
			out.SetInt(int64(v.Uint()))
		} else {
			if out.OverflowUint(v.Uint()) {
				break
			}
			out.SetUint(v.Uint())
		}
		return out.Interface(), nil
	case v.Kind() == reflect.String && kt.Kind() == reflect.String:
		return v.Convert(kt).Interface(), nil
	}
	return nil, fmt.Errorf("%w: key %s of type %T does not fit key field of type %v", ErrInvalid, quoteKey(key), key, kt)
}

func validVersion(v int64) error {
	if v < 1 {
		return fmt.Errorf("%w: version %d (versions start at 1)", ErrInvalid, v)
	}
	return nil
}
