package atomic

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/short"
)

// FencedConfig configures a Fenced store. The zero value is valid.
type FencedConfig struct {
	// TTL is the lease taken on each key for one operation. The read,
	// check and write must fit in it for the lock to exclude anything; the
	// fence, not the lease, is what keeps a late write out. Defaults to 10s.
	TTL time.Duration
	// Holder names this client to the lock service. Defaults to "atomic-"
	// followed by random hex.
	Holder string
	// LockPrefix starts every lock name; the key follows it (a key too long
	// for a lock name, or one that starts with "sha256:", is replaced by
	// "sha256:" and its SHA-256). At most 184 bytes. Defaults to "atomic/" +
	// the table name + "/".
	LockPrefix string
	// TokenColumn is the bigint column (NOT NULL DEFAULT 0) of the user's
	// table that keeps the highest fencing token that touched each row.
	// Defaults to "fencing_token".
	TokenColumn string
	// Wait configures waiting for a key another client holds. Defaults to
	// the fencedlock.WaitConfig defaults.
	Wait *fencedlock.WaitConfig
	// BeforeWrite, when set, is called after the read and the check and
	// before the write, once per key written. Fault tests and the
	// comparison harness pause here past the lease. Defaults to none.
	BeforeWrite func(ctx context.Context, key string)
	// Unfenced turns the twin into the naive lock: lock → read → check →
	// plain write, with no token at the resource. It oversells when a
	// holder pauses past its lease; it exists to show that in comparisons
	// and tests. Never set it otherwise. Defaults to false.
	Unfenced bool
}

// Fenced is the fenced-lock twin of Postgres: the same operations and errors
// on the same table, done the lock-based way — acquire a lease on the key
// (fencedlock.Store) → read → check in Go → fenced write
// (fencedlock.Fence.Update) → release. It exists to be compared with
// Postgres, which needs none of this.
//
// The read is fenced too: before reading, the holder stamps its token on the
// row (a fenced no-op update). A fenced write alone is not enough for a
// read-modify-write: holder A (token 5) reads 10 and pauses past its lease,
// B (token 6) reads 10, A wakes and writes 9 — accepted, no higher token has
// written yet — then B writes 9 with token 6, also accepted, and one
// decrement is lost. With the stamp, B's read raises the row to 6 before A's
// write, so A's write is rejected with a *fencedlock.FencedError
// (fencedlock.ErrFenced) and nothing changes. The cost is an extra write per
// operation.
//
// The table needs cfg.TokenColumn. Errors are those of Store plus fencing
// rejections and lock-service errors. It is safe for concurrent use.
type Fenced struct {
	locks  fencedlock.Store
	db     DB
	table  Table
	fence  fencedlock.Fence
	cfg    FencedConfig
	prefix string
	sql    struct{ value, write, claim string }
}

// NewFenced returns the twin working on table through db, taking its locks
// from locks. Bad configuration is an ErrInvalid.
func NewFenced(locks fencedlock.Store, db DB, table Table, cfg *FencedConfig) (*Fenced, error) {
	var c FencedConfig
	if cfg != nil {
		c = *cfg
	}
	if locks == nil || db == nil {
		return nil, fmt.Errorf("%w: invalid config: nil lock store or DB", ErrInvalid)
	}
	if err := table.validate(); err != nil {
		return nil, err
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.TTL < fencedlock.MinTTL || c.TTL > fencedlock.MaxTTL {
		return nil, fmt.Errorf("%w: invalid config: ttl %v", ErrInvalid, c.TTL)
	}
	if c.Holder == "" {
		var b [8]byte
		rand.Read(b[:])
		c.Holder = "atomic-" + hex.EncodeToString(b[:])
	}
	if c.TokenColumn == "" {
		c.TokenColumn = "fencing_token"
	}
	if !validIdentifier(c.TokenColumn) {
		return nil, fmt.Errorf("%w: invalid config: token column %s", ErrInvalid, short.Quote(c.TokenColumn))
	}
	if c.LockPrefix == "" {
		c.LockPrefix = "atomic/" + table.Name + "/"
	}
	if len(c.LockPrefix) > maxPrefixLen || !utf8.ValidString(c.LockPrefix) || strings.ContainsRune(c.LockPrefix, 0) {
		return nil, fmt.Errorf("%w: invalid config: lock prefix %s must be at most %d bytes of UTF-8 without NUL",
			ErrInvalid, short.Quote(c.LockPrefix), maxPrefixLen)
	}
	f := &Fenced{
		locks: locks, db: db, table: table, cfg: c, prefix: c.LockPrefix,
		fence: fencedlock.Fence{Schema: table.Schema, Table: table.Name, Key: table.Key, TokenColumn: c.TokenColumn},
	}
	tok := pgx.Identifier{c.TokenColumn}.Sanitize()
	f.sql.value = table.render(sqlValue)
	f.sql.write = table.render(`UPDATE {T} SET {V} = $2 WHERE {K} = $1`)
	f.sql.claim = table.render(`INSERT INTO {T} ({K}, {V}, ` + tok + `) VALUES ($1, $2, $3) ON CONFLICT ({K}) DO NOTHING`)
	return f, nil
}

// WithDB returns a twin that runs its statements on db — typically the
// caller's transaction — with the same table, locks and configuration.
func (f *Fenced) WithDB(db DB) *Fenced {
	c := *f
	c.db = db
	return &c
}

// digestMarker starts the part of a lock name that is a SHA-256 of the key
// rather than the key itself.
const digestMarker = "sha256:"

// maxPrefixLen leaves room in a lock name for a hashed key.
const maxPrefixLen = fencedlock.MaxNameLen - len(digestMarker) - 2*sha256.Size

// lockName returns the prefix followed by the key, or by digestMarker and the
// key's SHA-256 when that would be longer than a lock name may be. A key that
// itself starts with digestMarker is always hashed, so no key can name the
// lock of another.
func (f *Fenced) lockName(key string) string {
	if len(f.prefix)+len(key) <= fencedlock.MaxNameLen && !strings.HasPrefix(key, digestMarker) {
		return f.prefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return f.prefix + digestMarker + hex.EncodeToString(sum[:])
}

// lock acquires the leases of keys, which must be sorted, waiting while
// others hold them. It returns a function that releases them all.
func (f *Fenced) lock(ctx context.Context, keys ...string) (map[string]fencedlock.Lease, func(), error) {
	leases := make(map[string]fencedlock.Lease, len(keys))
	release := func() {
		// An expired or overtaken lease has nothing to free (the fence
		// decided the write), and a failed release only delays the next
		// holder until the lease expires.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		for _, l := range leases {
			_ = f.locks.Release(rctx, l)
		}
	}
	for _, k := range keys {
		name := f.lockName(k)
		l, err := fencedlock.AcquireWait(ctx, f.locks, name, f.cfg.Holder, f.cfg.TTL, f.cfg.Wait)
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("atomic: lock %s: %w", short.Quote(name), err)
		}
		leases[k] = l
	}
	return leases, release, nil
}

// read stamps the row with token (unless unfenced) and returns its value.
func (f *Fenced) read(ctx context.Context, db DB, key string, token int64) (int64, error) {
	if !f.cfg.Unfenced {
		v := pgx.Identifier{f.table.Value}.Sanitize()
		if err := f.fence.Update(ctx, db, key, token, v+" = "+v); err != nil {
			return 0, f.fenceErr(key, err)
		}
	}
	var v int64
	err := db.QueryRow(ctx, f.sql.value, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(key)
	}
	if err != nil {
		return 0, fmt.Errorf("atomic: read %s: %w", short.Quote(key), err)
	}
	return v, nil
}

// write stores next as key's value with token (plainly when unfenced).
func (f *Fenced) write(ctx context.Context, db DB, key string, token, next int64) error {
	if f.cfg.BeforeWrite != nil {
		f.cfg.BeforeWrite(ctx, key)
	}
	if f.cfg.Unfenced {
		tag, err := db.Exec(ctx, f.sql.write, key, next)
		if err != nil {
			return fmt.Errorf("atomic: write %s: %w", short.Quote(key), err)
		}
		if tag.RowsAffected() == 0 {
			return notFound(key)
		}
		return nil
	}
	v := pgx.Identifier{f.table.Value}.Sanitize()
	return f.fenceErr(key, f.fence.Update(ctx, db, key, token, v+" = $1", next))
}

func (f *Fenced) fenceErr(key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencedlock.ErrNotFound):
		return notFound(key)
	case errors.Is(err, fencedlock.ErrFenced):
		return fmt.Errorf("atomic: fenced write of %s: %w", short.Quote(key), err)
	}
	return fmt.Errorf("atomic: %s: %w", short.Quote(key), err)
}

// update is the twin's single-key operation: lock, read, decide, write,
// release. decide returns the new value or the refusal.
func (f *Fenced) update(ctx context.Context, key string, decide func(current int64) (int64, error)) (int64, error) {
	leases, release, err := f.lock(ctx, key)
	if err != nil {
		return 0, err
	}
	defer release()
	token := leases[key].Token
	cur, err := f.read(ctx, f.db, key, token)
	if err != nil {
		return 0, err
	}
	next, err := decide(cur)
	if err != nil {
		return 0, err
	}
	if err := f.write(ctx, f.db, key, token, next); err != nil {
		return 0, err
	}
	return next, nil
}

// Decrement implements Store.
func (f *Fenced) Decrement(ctx context.Context, key string, amount int64) (int64, error) {
	threshold, err := decrementThreshold(key, amount, f.table.Floor)
	if err != nil {
		return 0, err
	}
	return f.update(ctx, key, func(cur int64) (int64, error) {
		if cur < threshold {
			return 0, &InsufficientError{Op: OpDecrement, Key: key, Current: cur, Amount: amount, Bound: f.table.Floor}
		}
		return cur - amount, nil
	})
}

// Increment implements Store.
func (f *Fenced) Increment(ctx context.Context, key string, amount, limit int64) (int64, error) {
	ceiling, err := incrementCeiling(key, amount, limit)
	if err != nil {
		return 0, err
	}
	return f.update(ctx, key, func(cur int64) (int64, error) {
		if cur > ceiling {
			return 0, incrementMiss(key, amount, limit, cur)
		}
		return cur + amount, nil
	})
}

// CompareAndSet implements Store.
func (f *Fenced) CompareAndSet(ctx context.Context, key string, old, next int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	_, err := f.update(ctx, key, func(cur int64) (int64, error) {
		if cur != old {
			return 0, &ConflictError{Op: OpCompareAndSet, Key: key, Offered: old, Current: cur}
		}
		return next, nil
	})
	return err
}

// SetIfGreater implements Store.
func (f *Fenced) SetIfGreater(ctx context.Context, key string, value int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	_, err := f.update(ctx, key, func(cur int64) (int64, error) {
		if value <= cur {
			return 0, &ConflictError{Op: OpSetIfGreater, Key: key, Offered: value, Current: cur}
		}
		return value, nil
	})
	return err
}

// Claim implements Store: lock, look, insert with the token, release. The
// insert still relies on the key's unique index: a row that does not exist
// yet has no token to fence with.
func (f *Fenced) Claim(ctx context.Context, key string, value int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	leases, release, err := f.lock(ctx, key)
	if err != nil {
		return err
	}
	defer release()
	conflict := func() error {
		var cur int64
		err := f.db.QueryRow(ctx, f.sql.value, key).Scan(&cur)
		if err != nil {
			return fmt.Errorf("atomic: claim %s: %w", short.Quote(key), err)
		}
		return &ConflictError{Op: OpClaim, Key: key, Offered: value, Current: cur}
	}
	var cur int64
	err = f.db.QueryRow(ctx, f.sql.value, key).Scan(&cur)
	switch {
	case err == nil:
		return &ConflictError{Op: OpClaim, Key: key, Offered: value, Current: cur}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("atomic: claim %s: %w", short.Quote(key), err)
	}
	if f.cfg.BeforeWrite != nil {
		f.cfg.BeforeWrite(ctx, key)
	}
	tag, err := f.db.Exec(ctx, f.sql.claim, key, value, leases[key].Token)
	if err != nil {
		return fmt.Errorf("atomic: claim %s: %w", short.Quote(key), err)
	}
	if tag.RowsAffected() == 0 {
		return conflict()
	}
	return nil
}

// DecrementMany implements Store: it locks the keys in sorted order (so
// batches cannot wait on each other in a cycle), then in one transaction
// stamps and reads every row, checks them all, and writes them all; a
// refusal or a fencing rejection rolls everything back.
func (f *Fenced) DecrementMany(ctx context.Context, amounts map[string]int64) (map[string]int64, error) {
	b, err := newBatch(amounts, f.table.Floor)
	if err != nil {
		return nil, err
	}
	leases, release, err := f.lock(ctx, b.keys...)
	if err != nil {
		return nil, err
	}
	defer release()
	out := make(map[string]int64, len(b.keys))
	err = pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
		for i, k := range b.keys {
			cur, err := f.read(ctx, tx, k, leases[k].Token)
			if err != nil {
				return err
			}
			if cur < b.thresholds[i] {
				return &InsufficientError{Op: OpDecrementMany, Key: k, Current: cur, Amount: b.amounts[i], Bound: f.table.Floor}
			}
			out[k] = cur - b.amounts[i]
		}
		for _, k := range b.keys {
			if err := f.write(ctx, tx, k, leases[k].Token, out[k]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Value implements Store: a plain read, without a lock.
func (f *Fenced) Value(ctx context.Context, key string) (int64, error) {
	if err := validKey(key); err != nil {
		return 0, err
	}
	var v int64
	err := f.db.QueryRow(ctx, f.sql.value, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(key)
	}
	if err != nil {
		return 0, fmt.Errorf("atomic: value %s: %w", short.Quote(key), err)
	}
	return v, nil
}
