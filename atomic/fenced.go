package atomic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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

// locked runs fn holding the leases of keys, which must be sorted: they are
// taken one after another in that order, so that two batches cannot wait on
// each other in a cycle. It returns fn's error as it is, or the error of
// the acquire that kept fn from running.
func (f *Fenced) locked(ctx context.Context, keys []string, fn func(leases []fencedlock.Lease) error) error {
	var (
		ran  bool
		ferr error
	)
	err := f.lockAll(ctx, keys, make([]fencedlock.Lease, 0, len(keys)), func(leases []fencedlock.Lease) error {
		ran, ferr = true, fn(leases)
		return ferr
	})
	if ran {
		return ferr // with fn done, a release error only delays the next holder
	}
	return fmt.Errorf("atomic: lock: %w", err)
}

func (f *Fenced) lockAll(ctx context.Context, keys []string, leases []fencedlock.Lease, fn func([]fencedlock.Lease) error) error {
	if len(keys) == 0 {
		return fn(leases)
	}
	return f.locker.Do(ctx, f.lockName(keys[0]), func(_ context.Context, lease fencedlock.Lease) error {
		return f.lockAll(ctx, keys[1:], append(leases, lease), fn)
	})
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
	err := f.locked(ctx, []string{key}, func(leases []fencedlock.Lease) error {
		cur, err := f.read(ctx, f.db, key, leases[0].Token)
		if err != nil {
			return err
		}
		if next, err = decide(cur); err != nil {
			return err
		}
		failpoint.Inject(ctx, "atomic.fenced.before-write")
		return f.write(ctx, f.db, key, leases[0].Token, next)
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
	return f.locked(ctx, []string{key}, func(leases []fencedlock.Lease) error {
		if cur, err := f.Value(ctx, key); !errors.Is(err, ErrNotFound) {
			if err != nil {
				return err
			}
			return &ConflictError{Op: OpClaim, Key: key, Expected: value, Actual: cur}
		}
		failpoint.Inject(ctx, "atomic.fenced.before-write")
		tag, err := f.db.Exec(ctx, f.sql.claim, key, value, leases[0].Token)
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

// DecrementMany implements Store: it locks the keys in sorted order (so
// batches cannot wait on each other in a cycle), stamps and reads every row
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
	b, err := newBatch(amounts, f.table.Floor)
	if err != nil {
		return nil, err
	}
	var out map[string]int64
	err = f.locked(ctx, b.keys, func(leases []fencedlock.Lease) error {
		next, err := f.readBatch(ctx, f.db, b, leases)
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
				if err := f.write(ctx, tx, k, leases[i].Token, next[k]); err != nil {
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
func (f *Fenced) readBatch(ctx context.Context, db DB, b batch, leases []fencedlock.Lease) (map[string]int64, error) {
	next := make(map[string]int64, len(b.keys))
	for i, k := range b.keys {
		cur, err := f.read(ctx, db, k, leases[i].Token)
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
