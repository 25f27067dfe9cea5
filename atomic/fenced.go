package atomic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"maps"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// FencedConfig configures a Fenced store. A nil *FencedConfig means the
// defaults.
//
// The embedded LockerConfig configures the lock taken on each key, with
// fencedlock's defaults (Holder: a new UUIDv7; TTL: 10s; Wait, Keepalive and
// ReleaseTimeout: fencedlock's) except LockPrefix, which defaults to
// "atomic/" + the table's name + "/" and must be at most 184 bytes of UTF-8
// without NUL. The key follows the prefix in the lock's name — or
// "sha256:" and the key's SHA-256 does, when the name would be longer than
// fencedlock.MaxNameLen or the key itself starts with "sha256:", so that no
// key can name the lock of another.
type FencedConfig struct {
	fencedlock.LockerConfig
	// TokenColumn is the bigint column (NOT NULL DEFAULT 0) of the user's
	// table that keeps the highest fencing token that read or wrote each
	// row. Defaults to "fencing_token".
	TokenColumn string
}

func (c *FencedConfig) withDefaults(t Table) FencedConfig {
	var d FencedConfig
	if c != nil {
		d = *c
	}
	if d.LockPrefix == "" {
		d.LockPrefix = "atomic/" + t.Name + "/"
	}
	if d.TokenColumn == "" {
		d.TokenColumn = "fencing_token"
	}
	return d
}

// validate checks what the twin adds to fencedlock's checks, which NewLocker
// makes.
func (c FencedConfig) validate() error {
	if !validIdentifier(c.TokenColumn) {
		return fmt.Errorf("%w: token column %s", ErrInvalid, short.Quote(c.TokenColumn))
	}
	if len(c.LockPrefix) > maxPrefixLen || !utf8.ValidString(c.LockPrefix) || strings.ContainsRune(c.LockPrefix, 0) {
		return fmt.Errorf("%w: lock prefix %s must be at most %d bytes of UTF-8 without NUL",
			ErrInvalid, short.Quote(c.LockPrefix), maxPrefixLen)
	}
	return nil
}

// sqlFencedClaim inserts a claimed row with the lease's token, so that no
// older holder can write it afterwards. {F} is the token column.
const sqlFencedClaim = `INSERT INTO {T} ({K}, {V}, {F}) VALUES ($1, $2, $3) ON CONFLICT ({K}) DO NOTHING`

// fencedStatements are the twin's SQL for one table, rendered once.
type fencedStatements struct {
	value  string // the plain read: sqlValue
	column string // the quoted value column, which the fenced read returns
	set    string // the fenced write's SET list
	claim  string
}

// Fenced is the fenced-lock twin of Postgres: the same operations and errors
// on the same table, done the lock-based way on a fencedlock.Locker — lock
// the key → fenced read (fencedlock.Fence.Read: one UPDATE that raises the
// row's token to the lease's and returns the value) → check in Go → fenced
// write (fencedlock.Fence.Update) → release. A decrement costs it four round
// trips where Postgres needs one. It exists to be compared with Postgres,
// which needs none of this.
//
// The read is fenced too: a fenced write alone is not enough for a
// read-modify-write. Holder A (token 5) reads 10 and pauses past its lease,
// B (token 6) reads 10, A wakes and writes 9 — accepted, no higher token has
// written yet — then B writes 9 with token 6, also accepted, and one
// decrement is lost. With the stamp, B's read raises the row to 6 before A's
// write, so A's write is rejected with a *fencedlock.FencedError
// (fencedlock.ErrFenced) and nothing changes.
//
// The statements run on the caller's ctx, not on the context Locker.Do
// hands over: the keepalive's early warning reaches only a process that is
// running to see it, and the twin stands for the fence, which holds when the
// process was paused. A failed release is not an error: it only delays the
// next holder until the lease expires.
//
// The table needs cfg.TokenColumn. Errors are those of Store plus fencing
// rejections and the lock service's errors. It is safe for concurrent use;
// the zero value is not usable: call NewFenced.
type Fenced struct {
	locker *fencedlock.Locker
	db     TxDB
	table  Table
	fence  fencedlock.Fence
	prefix string
	sql    fencedStatements
	tel    *storeTelemetry
}

// NewFenced returns the twin working on table through db, taking its locks
// from locks. A nil cfg means the defaults. A nil locks or db, a bad table
// or a bad cfg give an error matching ErrInvalid (and fencedlock.ErrInvalid
// for what fencedlock refuses); it does no I/O.
func NewFenced(locks fencedlock.Store, db TxDB, table Table, cfg *FencedConfig) (*Fenced, error) {
	if locks == nil || db == nil {
		return nil, fmt.Errorf("%w: nil lock store or DB", ErrInvalid)
	}
	if err := table.validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults(table)
	if err := c.validate(); err != nil {
		return nil, err
	}
	locker, err := fencedlock.NewLocker(locks, &c.LockerConfig)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	value := pgx.Identifier{table.Value}.Sanitize()
	return &Fenced{
		locker: locker, db: db, table: table, prefix: c.LockPrefix, tel: newTelemetry(table.MeterProvider, table.TracerProvider),
		fence: fencedlock.Fence{Schema: table.Schema, Table: table.Name, Key: table.Key, TokenColumn: c.TokenColumn},
		sql: fencedStatements{
			value: table.render(sqlValue), column: value, set: value + " = $1",
			claim: strings.ReplaceAll(table.render(sqlFencedClaim), "{F}", pgx.Identifier{c.TokenColumn}.Sanitize()),
		},
	}, nil
}

// WithDB returns a twin that runs its statements on db — typically the
// caller's transaction — with the same table, locks and configuration.
func (f *Fenced) WithDB(db TxDB) *Fenced {
	c := *f
	c.db = db
	return &c
}

// digestMarker starts the part of a lock name that is a SHA-256 of the key
// rather than the key itself.
const digestMarker = "sha256:"

// maxPrefixLen leaves room in a lock name for a hashed key.
const maxPrefixLen = fencedlock.MaxNameLen - len(digestMarker) - 2*sha256.Size

// lockName returns the name, after the prefix, of key's lock: the key, or
// digestMarker and the key's SHA-256 when prefix and key would be longer
// than a lock name may be. A key that itself starts with digestMarker is
// always hashed, so no key can name the lock of another.
func (f *Fenced) lockName(key string) string {
	if len(f.prefix)+len(key) <= fencedlock.MaxNameLen && !strings.HasPrefix(key, digestMarker) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return digestMarker + hex.EncodeToString(sum[:])
}

// locked runs fn holding key's lease. It returns fn's error as it is, or
// the error of the acquire that kept fn from running.
func (f *Fenced) locked(ctx context.Context, key string, fn func(lease fencedlock.Lease) error) error {
	var (
		ran  bool
		ferr error
	)
	err := f.locker.Do(ctx, f.lockName(key), func(_ context.Context, lease fencedlock.Lease) error {
		ran, ferr = true, fn(lease)
		return ferr
	})
	return lockErr(ran, ferr, err)
}

// lockedAll runs fn holding the leases of keys, taken at once
// (fencedlock.Locker.DoAll: all or nothing, in an order of its own, so
// that two batches cannot wait on each other in a cycle), tokens[k] the
// token of key k's lease.
func (f *Fenced) lockedAll(ctx context.Context, keys iter.Seq[string], fn func(tokens map[string]int64) error) error {
	var names, order []string
	for k := range keys {
		order = append(order, k)
		names = append(names, f.lockName(k))
	}
	var (
		ran  bool
		ferr error
	)
	err := f.locker.DoAll(ctx, names, func(_ context.Context, leases []fencedlock.Lease) error {
		tokens := make(map[string]int64, len(leases))
		for i, l := range leases {
			tokens[order[i]] = l.Token
		}
		ran, ferr = true, fn(tokens)
		return ferr
	})
	return lockErr(ran, ferr, err)
}

// lockErr is the error of a locked run: fn's (ferr) as it is when it ran —
// with fn done, a release error only delays the next holder — else the
// acquire's.
func lockErr(ran bool, ferr, err error) error {
	if ran {
		return ferr
	}
	return fmt.Errorf("atomic: lock: %w", err)
}

// read is the fenced read: one statement raises key's token to token and
// returns its value.
func (f *Fenced) read(ctx context.Context, db DB, key string, token int64) (int64, error) {
	var v int64
	if err := f.fence.Read(ctx, db, key, token, f.sql.column, &v); err != nil {
		return 0, f.fenceErr("fenced read", key, err)
	}
	return v, nil
}

// write stores next as key's value if no token above token has touched it.
func (f *Fenced) write(ctx context.Context, db DB, key string, token, next int64) error {
	return f.fenceErr("fenced write", key, f.fence.Update(ctx, db, key, token, f.sql.set, next))
}

func (f *Fenced) fenceErr(what, key string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fencedlock.ErrNotFound):
		return notFound(key)
	}
	return fmt.Errorf("atomic: %s of %s: %w", what, short.Quote(key), err)
}

// update is the twin's single-key operation: lock, fenced read, decide,
// fenced write, release.
func (f *Fenced) update(ctx context.Context, key string, decide decision) (int64, error) {
	var next int64
	err := f.locked(ctx, key, func(lease fencedlock.Lease) error {
		cur, err := f.read(ctx, f.db, key, lease.Token)
		if err != nil {
			return err
		}
		if next, err = decide(cur); err != nil {
			return err
		}
		failpoint.Inject(ctx, "atomic.fenced.before-write")
		return f.write(ctx, f.db, key, lease.Token, next)
	})
	if err != nil {
		return 0, err
	}
	return next, nil
}

// noID refuses an operation ID: the twin records none.
func noID(opts []Option) error {
	if _, ok := OperationID(opts...); ok {
		return fmt.Errorf("%w: the fenced twin records no operation IDs (use Postgres or Memory)", ErrInvalid)
	}
	return nil
}

// Decrement implements Store.
func (f *Fenced) Decrement(ctx context.Context, key string, amount int64, opts ...Option) (_ int64, err error) {
	ctx, op := f.tel.start(ctx, opDecrement)
	defer func() { op.end(ctx, err) }()
	if err := noID(opts); err != nil {
		return 0, err
	}
	d, err := decrement(key, amount, f.table.Floor)
	if err != nil {
		return 0, err
	}
	return f.update(ctx, key, d)
}

// Increment implements Store.
func (f *Fenced) Increment(ctx context.Context, key string, amount, limit int64, opts ...Option) (_ int64, err error) {
	ctx, op := f.tel.start(ctx, opIncrement)
	defer func() { op.end(ctx, err) }()
	if err := noID(opts); err != nil {
		return 0, err
	}
	d, err := increment(key, amount, limit)
	if err != nil {
		return 0, err
	}
	return f.update(ctx, key, d)
}

// CompareAndSet implements Store.
func (f *Fenced) CompareAndSet(ctx context.Context, key string, old, next int64, opts ...Option) (err error) {
	ctx, op := f.tel.start(ctx, opCompareAndSet)
	defer func() { op.end(ctx, err) }()
	if err := noID(opts); err != nil {
		return err
	}
	d, err := compareAndSet(key, old, next)
	if err != nil {
		return err
	}
	_, err = f.update(ctx, key, d)
	return err
}

// SetIfGreater implements Store.
func (f *Fenced) SetIfGreater(ctx context.Context, key string, value int64, opts ...Option) (err error) {
	ctx, op := f.tel.start(ctx, opSetIfGreater)
	defer func() { op.end(ctx, err) }()
	if err := noID(opts); err != nil {
		return err
	}
	d, err := setIfGreater(key, value)
	if err != nil {
		return err
	}
	_, err = f.update(ctx, key, d)
	return err
}

// Claim implements Store: lock, look, insert with the token, release. The
// insert still relies on the key's unique index: a row that does not exist
// yet has no token to fence with.
func (f *Fenced) Claim(ctx context.Context, key string, value int64, opts ...Option) (err error) {
	ctx, op := f.tel.start(ctx, opClaim)
	defer func() { op.end(ctx, err) }()
	if err := noID(opts); err != nil {
		return err
	}
	if err := validKey(key); err != nil {
		return err
	}
	return f.locked(ctx, key, func(lease fencedlock.Lease) error {
		if cur, err := f.Value(ctx, key); !errors.Is(err, ErrNotFound) {
			if err != nil {
				return err
			}
			return &ConflictError{Op: OpClaim, Key: key, Expected: value, Actual: cur}
		}
		failpoint.Inject(ctx, "atomic.fenced.before-write")
		tag, err := f.db.Exec(ctx, f.sql.claim, key, value, lease.Token)
		if err != nil {
			return fmt.Errorf("atomic: claim %s: %w", short.Quote(key), err)
		}
		if tag.RowsAffected() > 0 {
			return nil
		}
		// Inserted meanwhile by a holder whose lease had run out, or
		// without the lock.
		cur, err := f.Value(ctx, key)
		if err != nil {
			return err
		}
		return &ConflictError{Op: OpClaim, Key: key, Expected: value, Actual: cur}
	})
}

// DecrementMany implements Store: it takes the keys' locks at once (one
// fencedlock.Locker.DoAll: all or nothing, in sorted order, so batches
// cannot wait on each other in a cycle), stamps and reads every row
// (each a statement of its own, as the single-key operations do), checks
// them all, then writes them all in one transaction: a refusal writes
// nothing, and a fencing rejection of any write rolls every write back. No
// transaction is open between the reads and the writes, so a holder that
// stalls there (a pause past its lease) holds no row lock that would keep
// the next holder from stamping the rows and going on; its writes are then
// refused by the next holder's tokens.
func (f *Fenced) DecrementMany(ctx context.Context, amounts map[string]int64, opts ...Option) (_ map[string]int64, err error) {
	ctx, op := f.tel.start(ctx, opDecrementMany)
	defer func() { op.end(ctx, err) }()
	if err := noID(opts); err != nil {
		return nil, err
	}
	if len(amounts) > fencedlock.MaxAcquireAll {
		return nil, fmt.Errorf("%w: the fenced twin locks at most %d keys at once, not %d", ErrInvalid, fencedlock.MaxAcquireAll, len(amounts))
	}
	b, err := newBatch(amounts, f.table.Floor)
	if err != nil {
		return nil, err
	}
	var out map[string]int64
	err = f.lockedAll(ctx, maps.Keys(amounts), func(tokens map[string]int64) error {
		next, err := f.readBatch(ctx, f.db, b, tokens)
		if err != nil {
			return err
		}
		failpoint.Inject(ctx, "atomic.fenced.before-write")
		return pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
			for i, k := range b.keys {
				if i > 0 {
					// Its first write done, the transaction open.
					failpoint.Inject(ctx, "atomic.fenced.in-tx")
				}
				if err := f.write(ctx, tx, k, tokens[k], next[k]); err != nil {
					return err
				}
			}
			out = next
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// readBatch stamps and reads every key of b with its lease's token, and
// returns the values the batch leaves, or the refusal of the first key in
// key order that is short.
func (f *Fenced) readBatch(ctx context.Context, db DB, b batch, tokens map[string]int64) (map[string]int64, error) {
	next := make(map[string]int64, len(b.keys))
	for i, k := range b.keys {
		cur, err := f.read(ctx, db, k, tokens[k])
		if err != nil {
			return nil, err
		}
		if cur < b.thresholds[i] {
			return nil, &InsufficientError{Op: OpDecrementMany, Key: k, Actual: cur, Amount: b.amounts[i], Bound: f.table.Floor}
		}
		next[k] = cur - b.amounts[i]
	}
	return next, nil
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
