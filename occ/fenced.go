package occ

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// FencedConfig configures a Fenced updater. A nil *FencedConfig, like the
// zero value, means the defaults; a FencedConfig is a value, safe to copy.
// The embedded LockerConfig is the lock's (Holder, TTL, LockPrefix, Wait,
// Keepalive, ReleaseTimeout), with fencedlock's defaults except LockPrefix,
// which defaults to "occ/" + the table's name + "/" ("occ/" for a Memory
// store) and may be at most 184 bytes: the key follows it, or "sha256:" and
// the key's SHA-256 when the name would be too long for a lock or the key
// itself starts with "sha256:".
type FencedConfig struct {
	fencedlock.LockerConfig
	// TokenColumn is the bigint column (NOT NULL DEFAULT 0) of the user's
	// table that keeps the highest fencing token that read or wrote each
	// row. Ignored for a Memory store, which keeps the token beside the
	// row. Defaults to "fencing_token".
	TokenColumn string
}

func (c *FencedConfig) withDefaults(prefix string) FencedConfig {
	var d FencedConfig
	if c != nil {
		d = *c
	}
	if d.LockPrefix == "" {
		d.LockPrefix = prefix
	}
	if d.TokenColumn == "" {
		d.TokenColumn = "fencing_token"
	}
	return d
}

func (c FencedConfig) validate() error {
	if err := validIdent("token column", c.TokenColumn, true); err != nil {
		return err
	}
	p := c.LockPrefix
	if len(p) > maxPrefixLen || !utf8.ValidString(p) || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("%w: lock prefix %s must be at most %d bytes of UTF-8 without NUL",
			ErrInvalid, short.Quote(p), maxPrefixLen)
	}
	return nil
}

// maxPrefixLen leaves room in a lock name for a hashed key.
const maxPrefixLen = fencedlock.MaxNameLen - len(digestMarker) - 2*sha256.Size

// digestMarker starts the part of a lock name that is a SHA-256 of the key
// rather than the key itself.
const digestMarker = "sha256:"

// Fenced is the fenced-lock twin of Update: the same read-modify-write of one
// row, done with a fenced lease lock (fencedlock.Locker) in four round trips,
// the fewest the fencing allows: acquire a lease on the key → fenced read (one
// statement raises the row's token to the lease's and returns the row) →
// mutate → fenced write (rejected with a *fencedlock.FencedError if a later
// lease has read or written the row) → release. It bumps the row's version
// column too, so that optimistic writers on the same table see its writes.
// It is safe for concurrent use; the zero value is not usable, call
// NewFenced.
type Fenced[K comparable, T any] struct {
	locker *fencedlock.Locker
	rw     twinStore[K, T]
	m      *mapping[K]
	prefix string
}

// twinStore is a backend's fenced read and write, for Fenced.
type twinStore[K comparable, T any] interface {
	fencedLoad(ctx context.Context, key K, token int64) (T, int64, error)
	fencedWrite(ctx context.Context, row T, loaded, token int64) (int64, error)
}

// NewFenced returns the twin updating rows of store, which must be a
// *Postgres (whose table then needs cfg.TokenColumn) or a *Memory of this
// package, under locks from locks. A nil locks, another store or a bad cfg is
// an ErrInvalid (a bad LockerConfig matches fencedlock.ErrInvalid too). It
// does no I/O.
func NewFenced[K comparable, T any](locks fencedlock.Store, store Store[K, T], cfg *FencedConfig) (*Fenced[K, T], error) {
	if locks == nil {
		return nil, fmt.Errorf("%w: nil lock store", ErrInvalid)
	}
	f := &Fenced[K, T]{}
	var prefix string
	switch s := store.(type) {
	case *Postgres[K, T]:
		f.m, prefix = s.m, "occ/"+s.table+"/"
	case *Memory[K, T]:
		f.m, f.rw, prefix = s.m, s, "occ/"
	default:
		return nil, fmt.Errorf("%w: Fenced needs an *occ.Postgres or *occ.Memory, not %T", ErrInvalid, store)
	}
	c := cfg.withDefaults(prefix)
	if err := c.validate(); err != nil {
		return nil, err
	}
	if s, ok := store.(*Postgres[K, T]); ok {
		f.rw = pgTwin[K, T]{p: s, fence: fencedlock.Fence{
			Schema: s.m.cfg.Schema, Table: s.table, Key: s.m.cfg.Key, TokenColumn: c.TokenColumn,
		}}
	}
	locker, err := fencedlock.NewLocker(locks, &c.LockerConfig)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	f.locker, f.prefix = locker, c.LockPrefix
	return f, nil
}

// lockName returns the key, or digestMarker and the key's SHA-256 when the
// prefix and the key would be longer than a lock name may be; the Locker
// puts the prefix before it. A key that itself starts with digestMarker is
// always hashed, so no key can name the lock of another.
func (f *Fenced[K, T]) lockName(k K) string {
	s := f.m.unambiguous(k)
	if len(f.prefix)+len(s) <= fencedlock.MaxNameLen && !strings.HasPrefix(s, digestMarker) {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return digestMarker + hex.EncodeToString(sum[:])
}

// Update locks key, reads its row with the lease's fencing token, calls
// mutate on it and writes it back with the token, then releases the lock; it
// returns the new version (the version read + 1: it counts on every other
// writer of the row either holding the lock or checking the version). It
// waits while another updater holds the lock, until ctx ends. A write that a
// later lease overtook fails with a *fencedlock.FencedError, and the row
// keeps the later write. mutate runs once; it must not change the key
// (ErrInvalid). An error from mutate ends Update with that error and nothing
// written. Once the write has committed, a failed release is not an error:
// the write stands, and the release only delays the next holder until the
// lease expires.
//
// The read and the write run on ctx, not on the context the Locker cancels
// when the lease can no longer be trusted: the fence, not the lease, decides
// whether a late write lands. A holder that paused past its lease writes when
// it wakes, and the fence accepts the write if no later lease has touched the
// row and rejects it otherwise.
func (f *Fenced[K, T]) Update(ctx context.Context, key K, mutate func(row *T) error) (int64, error) {
	if err := f.m.checkKey(key); err != nil {
		return 0, err
	}
	if mutate == nil {
		return 0, fmt.Errorf("%w: nil mutate function", ErrInvalid)
	}
	var (
		version int64
		wrote   bool
	)
	err := f.locker.Do(ctx, f.lockName(key), func(_ context.Context, lease fencedlock.Lease) error {
		// A fenced read: with a plain read, a paused former holder could
		// write between this read and this write, and this write would
		// overwrite it unchecked.
		row, loaded, err := f.rw.fencedLoad(ctx, key, lease.Token)
		if err != nil {
			return err
		}
		if err := mutate(&row); err != nil {
			return err
		}
		if f.m.keyOf(reflect.ValueOf(row)) != key {
			return fmt.Errorf("%w: mutate changed the key of row %s", ErrInvalid, f.m.quote(key))
		}
		failpoint.Inject(ctx, "occ.fenced.before-write")
		version, err = f.rw.fencedWrite(ctx, row, loaded, lease.Token)
		wrote = err == nil
		return err
	})
	if wrote {
		return version, nil // a release error only delays the next holder
	}
	return 0, err
}

// pgTwin is the Fenced twin's read and write on a Postgres store, through
// fencedlock.Fence on the store's table.
type pgTwin[K comparable, T any] struct {
	p     *Postgres[K, T]
	fence fencedlock.Fence
}

// fencedLoad stamps the row with token and returns it, in one statement
// (Fence.Read: UPDATE … SET token = $t WHERE key = $k AND token <= $t
// RETURNING every column).
func (t pgTwin[K, T]) fencedLoad(ctx context.Context, key K, token int64) (T, int64, error) {
	var row T
	err := t.fence.Read(ctx, t.p.db, key, token, t.p.sql.columns, t.p.dest(&row)...)
	if errors.Is(err, fencedlock.ErrNotFound) {
		var zero T
		return zero, 0, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		var zero T
		return zero, 0, err
	}
	return row, t.p.versionOf(&row), nil
}

// fencedWrite writes every column of row and bumps the version, if the row
// has seen no token above token (Fence.Update).
func (t pgTwin[K, T]) fencedWrite(ctx context.Context, row T, loaded, token int64) (int64, error) {
	rv := reflect.ValueOf(row)
	err := t.fence.Update(ctx, t.p.db, t.p.m.keyOf(rv), token, t.p.sql.set, t.p.setArgs(rv)...)
	if errors.Is(err, fencedlock.ErrNotFound) {
		return 0, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return 0, err
	}
	return loaded + 1, nil
}
