package occ

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
)

// FencedConfig configures a Fenced updater. The zero value is valid.
type FencedConfig struct {
	// TTL is the lease taken for each update. The read-modify-write must
	// fit in it for the lock to exclude anything; the fence, not the
	// lease, is what keeps a late write out. Defaults to 10s.
	TTL time.Duration
	// Holder names this updater to the lock service. Defaults to "occ-"
	// followed by random hex.
	Holder string
	// LockPrefix starts every lock name; the key follows it, or its SHA-256
	// when the name would be too long for a lock. At most 184 bytes.
	// Defaults to "occ/" + the table name + "/" ("occ/" for a
	// Memory store).
	LockPrefix string
	// TokenColumn is the bigint column (NOT NULL DEFAULT 0) of the user's
	// table that keeps the highest fencing token that wrote each row.
	// Ignored for a Memory store, which keeps the token beside the row.
	// Defaults to "fencing_token".
	TokenColumn string
	// Wait configures waiting for a lock another updater holds. Defaults
	// to the fencedlock.WaitConfig defaults.
	Wait *fencedlock.WaitConfig
	// Unfenced makes the write ignore the token: the naive lock (lock →
	// read → write) that loses updates when a holder pauses past its lease.
	// It exists to show that failure in comparisons and tests; never set it
	// otherwise. Defaults to false.
	Unfenced bool
}

// Fenced is the fenced-lock twin of Update: the same read-modify-write of
// one row, done as acquire a lease on the key (fencedlock) → Load → mutate →
// fenced write (fencedlock.Fence: rejected with a *fencedlock.FencedError if
// a later lease has written the row) → release. It writes the row's version
// column too (version + 1), so both approaches can share a table. It is safe
// for concurrent use.
type Fenced[T any] struct {
	locks fencedlock.Store
	store Store[T]
	m     *mapping
	cfg   FencedConfig
	write func(ctx context.Context, row T, loaded, token int64) (int64, error)
	// stamp raises the row\'s fencing token before the read (nil for the
	// naive variant), so that no older holder can write after this read.
	stamp  func(ctx context.Context, key any, token int64) error
	prefix string
}

// NewFenced returns the twin updating rows of store, which must be a
// *Postgres[T] (whose table then needs cfg.TokenColumn) or a *Memory[T] of
// this package, under locks from locks. Bad configuration is an ErrInvalid.
func NewFenced[T any](locks fencedlock.Store, store Store[T], cfg FencedConfig) (*Fenced[T], error) {
	if locks == nil {
		return nil, fmt.Errorf("%w: invalid config: nil lock store", ErrInvalid)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 10 * time.Second
	}
	if cfg.TTL < fencedlock.MinTTL || cfg.TTL > fencedlock.MaxTTL {
		return nil, fmt.Errorf("%w: invalid config: ttl %v", ErrInvalid, cfg.TTL)
	}
	if cfg.Holder == "" {
		var b [8]byte
		rand.Read(b[:])
		cfg.Holder = "occ-" + hex.EncodeToString(b[:])
	}
	if cfg.TokenColumn == "" {
		cfg.TokenColumn = "fencing_token"
	}
	if err := validIdent("token column", cfg.TokenColumn, true); err != nil {
		return nil, err
	}
	f := &Fenced[T]{locks: locks, store: store, cfg: cfg}
	switch s := store.(type) {
	case *Postgres[T]:
		fence := fencedlock.Fence{Schema: s.cfg.Schema, Table: s.cfg.Table, Key: s.cfg.Key, TokenColumn: cfg.TokenColumn}
		f.m, f.prefix = s.m, "occ/"+s.cfg.Table+"/"
		f.write = func(ctx context.Context, row T, loaded, token int64) (int64, error) {
			return s.writeLocked(ctx, row, loaded, fence, token, !cfg.Unfenced)
		}
		f.stamp = func(ctx context.Context, key any, token int64) error {
			var v int64
			err := fence.Read(ctx, s.db, key, token, pgx.Identifier{s.cfg.Version}.Sanitize(), &v)
			if errors.Is(err, fencedlock.ErrNotFound) {
				return fmt.Errorf("%w: %w", ErrNotFound, err)
			}
			return err
		}
	case *Memory[T]:
		f.m, f.prefix = s.m, "occ/"
		f.write = func(ctx context.Context, row T, _, token int64) (int64, error) {
			return s.writeLocked(ctx, row, token, !cfg.Unfenced)
		}
		f.stamp = s.stamp
	default:
		return nil, fmt.Errorf("%w: invalid config: Fenced needs a *occ.Postgres or *occ.Memory, not %T", ErrInvalid, store)
	}
	if cfg.LockPrefix != "" {
		f.prefix = cfg.LockPrefix
	}
	if err := validPrefix(f.prefix); err != nil {
		return nil, err
	}
	if cfg.Unfenced {
		f.stamp = nil
	}
	return f, nil
}

// maxPrefixLen leaves room in a lock name for a hashed key.
const maxPrefixLen = fencedlock.MaxNameLen - len(digestMarker) - 2*sha256.Size

func validPrefix(p string) error {
	if len(p) > maxPrefixLen || !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%w: invalid config: lock prefix %s must be at most %d bytes of UTF-8 without NUL",
			ErrInvalid, short.Quote(p), maxPrefixLen)
	}
	return nil
}

// digestMarker starts the part of a lock name that is a SHA-256 of the key
// rather than the key itself.
const digestMarker = "sha256:"

// lockName returns the prefix followed by the key, or by digestMarker and the
// key's SHA-256 when that would be longer than a lock name may be. A key that
// itself starts with digestMarker is always hashed, so no key can name the
// lock of another. Keys other than strings and integers are formatted with
// %#v, which quotes the strings inside them.
func (f *Fenced[T]) lockName(k any) string {
	var s string
	switch v := reflect.ValueOf(k); {
	case v.Kind() == reflect.String:
		s = v.String()
	case v.CanInt(), v.CanUint():
		s = fmt.Sprint(k)
	default:
		s = fmt.Sprintf("%#v", k)
	}
	if len(f.prefix)+len(s) <= fencedlock.MaxNameLen && !strings.HasPrefix(s, digestMarker) {
		return f.prefix + s
	}
	sum := sha256.Sum256([]byte(s))
	return f.prefix + digestMarker + hex.EncodeToString(sum[:])
}

// Update locks key, loads its row, calls mutate on it and writes it back
// with the lease's fencing token, then releases the lock; it returns the new
// version. It waits while another updater holds the lock, until ctx ends. A
// write that a later lease overtook fails with an error matching
// fencedlock.ErrFenced, and the row keeps the later write. mutate runs once;
// it must not change the key (ErrInvalid). An error from mutate ends Update
// with that error and nothing written.
func (f *Fenced[T]) Update(ctx context.Context, key any, mutate func(row *T) error) (int64, error) {
	k, err := f.m.normKey(key)
	if err != nil {
		return 0, err
	}
	if mutate == nil {
		return 0, fmt.Errorf("%w: nil mutate function", ErrInvalid)
	}
	name := f.lockName(k)
	lease, err := fencedlock.AcquireWait(ctx, f.locks, name, f.cfg.Holder, f.cfg.TTL, f.cfg.Wait)
	if err != nil {
		return 0, fmt.Errorf("occ: lock %s: %w", short.Quote(name), err)
	}
	defer func() {
		// An expired or overtaken lease has nothing to free; the fence
		// decided the write.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = f.locks.Release(rctx, lease)
		cancel()
	}()
	if f.stamp != nil {
		// A fenced read: with a plain read, a paused former holder could
		// write between this read and this write, and this write would
		// overwrite it unchecked.
		if err := f.stamp(ctx, k, lease.Token); err != nil {
			return 0, err
		}
	}
	row, v, err := f.store.Load(ctx, k)
	if err != nil {
		return 0, err
	}
	if err := mutate(&row); err != nil {
		return 0, err
	}
	if f.m.keyOf(reflect.ValueOf(row)) != k {
		return 0, fmt.Errorf("%w: mutate changed the key of row %s", ErrInvalid, quoteKey(key))
	}
	return f.write(ctx, row, v, lease.Token)
}
