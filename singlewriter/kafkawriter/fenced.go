package kafkawriter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

// FencedConfig configures a Fenced applier, the fenced-lock twin of the
// inbox. A nil *FencedConfig means the defaults.
type FencedConfig struct {
	// LockerConfig configures the per-entity locks (Holder, TTL, Wait,
	// Keepalive, ReleaseTimeout: fencedlock's defaults). LockPrefix
	// defaults to "kafkawriter/".
	fencedlock.LockerConfig
	// Tables says where the progress table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
}

// DefaultLockPrefix is the prefix of the fenced twin's lock names when
// LockerConfig.LockPrefix is empty.
const DefaultLockPrefix = "kafkawriter/"

func (c *FencedConfig) withDefaults() FencedConfig {
	var d FencedConfig
	if c != nil {
		d = *c
	}
	if d.LockPrefix == "" {
		d.LockPrefix = DefaultLockPrefix
	}
	return d
}

// The fenced twin's statements. The read is fenced and stamps: it raises the
// entity's token to the reader's, refuses a lower one, and returns the
// progress, creating the row on the entity's first event. From then on no
// older tenure can write, so the write needs only the token condition. The
// read is a statement of its own, not the transaction's first: there it
// would hold the row's lock until the commit, and that lock, not the fence,
// would hold off a paused holder's successor.
const (
	sqlFencedRead = `INSERT INTO {{entity_progress}} AS p (name, last_seq, fencing_token) VALUES ($1, -1, $2)
		ON CONFLICT (name) DO UPDATE SET fencing_token = $2 WHERE p.fencing_token <= $2
		RETURNING last_seq`
	sqlFencedWrite = `UPDATE {{entity_progress}} SET last_seq = $2 WHERE name = $1 AND fencing_token <= $3`
	sqlFencedToken = `SELECT fencing_token FROM {{entity_progress}} WHERE name = $1`
)

// Unsafe variants for the mutant sites, with the parameters of the
// statements they replace.
const (
	mutantFencedReadStamp = `INSERT INTO {{entity_progress}} AS p (name, last_seq, fencing_token) VALUES ($1, -1, 0)
		ON CONFLICT (name) DO UPDATE SET fencing_token = p.fencing_token WHERE p.fencing_token <= $2
		RETURNING last_seq`
	mutantFencedWriteToken = `UPDATE {{entity_progress}} SET last_seq = $2 WHERE name = $1 AND $3::bigint IS NOT NULL`
)

type progressStatements struct {
	read, write, token, mutantRead, mutantWrite string
}

func renderProgress(n migrate.Names) progressStatements {
	r := func(s string) string { return migrate.Render(s, n) }
	return progressStatements{read: r(sqlFencedRead), write: r(sqlFencedWrite), token: r(sqlFencedToken),
		mutantRead: r(mutantFencedReadStamp), mutantWrite: r(mutantFencedWriteToken)}
}

// ApplyFunc applies, in tx, an entity's events whose sequence numbers are
// above after (the highest already applied, or -1) and at most the seq given
// to Apply. It must do all its database writes on tx, which commits them
// with the entity's progress or rolls them back. Apply runs it under the
// entity's lock, on a goroutine of its own (a panic or runtime.Goexit is
// contained and returned as an error). The first pgx.Batch it sends on tx
// (tx.SendBatch) carries the entity's fenced progress write as its last
// statement, so that the events and their record cost one round trip;
// without one, the write follows fn's statements on its own.
type ApplyFunc func(ctx context.Context, tx pgx.Tx, after int64) error

// Fenced applies per-entity events exactly once the lock-based way: under
// the entity's fenced lock (fencedlock.Locker), a fenced read of the entity's
// progress raises its token to the lease's and returns the highest sequence
// number applied; the events above it run in one transaction that records
// the new highest with a write fenced by the token. A holder that paused past
// its lease and wakes after another took over changes nothing. Create it
// with NewFenced (the zero Fenced is not usable); it is safe for concurrent
// use.
//
// Compared with the inbox, whose transaction costs BEGIN, a compare-and-set
// and COMMIT per batch of any entities' events, a run of one entity's events
// costs six round trips besides fn's statements (acquire, fenced read,
// BEGIN, fenced write, COMMIT, release), or five and fn's when fn sends its
// statements in a pgx.Batch, which carries the fenced write; and a paused
// holder delays its entity by up to the lease TTL.
type Fenced struct {
	db     TxDB
	locker *fencedlock.Locker
	prefix int // len(LockPrefix): what the entity's name may not use
	sql    progressStatements
}

// NewFenced returns a Fenced applier on db, with its locks in locks; the
// schema must have been migrated (Migrations, and fencedlock's if the locks
// live in PostgreSQL). A nil cfg means the defaults. A nil db or locks, or a
// bad cfg, give an error matching ErrInvalid (and fencedlock.ErrInvalid for
// the LockerConfig, migrate.ErrInvalidName for Tables). It does no I/O.
func NewFenced(db TxDB, locks fencedlock.Store, cfg *FencedConfig) (*Fenced, error) {
	if isNil(db) || isNil(locks) {
		return nil, fmt.Errorf("%w: a fenced applier needs a DB and a lock store", ErrInvalid)
	}
	c := cfg.withDefaults()
	if err := c.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if len(c.LockPrefix) > fencedlock.MaxNameLen-digestLen {
		return nil, fmt.Errorf("%w: lock prefix of %d bytes leaves no room for an entity (at most %d)",
			ErrInvalid, len(c.LockPrefix), fencedlock.MaxNameLen-digestLen)
	}
	locker, err := fencedlock.NewLocker(locks, &c.LockerConfig)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Fenced{db: db, locker: locker, prefix: len(c.LockPrefix), sql: renderProgress(c.Tables)}, nil
}

// digestLen is the length of a hashed entity name: "sha256:" and 64 hex
// digits.
const digestLen = len("sha256:") + 2*sha256.Size

// entityName returns the progress row's name of an entity in a stream, which
// is also its lock's name after LockPrefix: "<len(stream)>:<stream>/<entity>",
// whose length prefix keeps ("orders", "eu/42") and ("orders/eu", "42")
// apart; or "sha256:" and the hex SHA-256 of that when it cannot be a lock
// name as it is (longer than limit, not valid UTF-8, or containing NUL, as
// binary Kafka keys may be). A readable name starts with a digit and a digest
// with "s", so no entity can name another's lock.
func entityName(stream, entity string, limit int) string {
	name := strconv.Itoa(len(stream)) + ":" + stream + "/" + entity
	if len(name) > limit || !utf8.ValidString(name) || strings.IndexByte(name, 0) >= 0 {
		sum := sha256.Sum256([]byte(name))
		name = "sha256:" + hex.EncodeToString(sum[:])
	}
	return name
}

// Apply applies entity's events in stream up to seq. Under the entity's
// lock it reads the highest sequence number applied, after; when after ≥ seq
// it returns (false, nil) and fn does not run. Otherwise fn applies the
// events in (after, seq] in a transaction, which records seq as the highest
// applied and commits: (true, nil). Sequence numbers must increase per
// entity (Kafka offsets do, per partition). Any entity is valid, binary
// included.
//
// A *fencedlock.FencedError means a newer lock tenure read or wrote the
// entity's progress since this one's read (this one paused past its lease):
// nothing was written; call Apply again to find the events applied, or apply
// them. fn's error rolls back and is returned as it is; a panic in fn is a
// *singlewriter.PanicError and a runtime.Goexit singlewriter.ErrGoexit, the
// lock released either way. Once the transaction has committed, Apply
// returns (true, nil) even if the release then fails: the events are
// applied, and the failed release only delays the next holder until the
// lease expires.
//
// fn and the transaction run under ctx, not under the lease's keepalive: a
// lease lost mid-transaction does not abort it; the fenced write decides
// whether it commits, as the inbox's compare-and-set decides for a Consumer.
func (f *Fenced) Apply(ctx context.Context, stream, entity string, seq int64, fn ApplyFunc) (applied bool, err error) {
	if stream == "" || entity == "" || seq < 0 || fn == nil {
		return false, fmt.Errorf("%w: apply needs a stream, an entity, a sequence ≥ 0 and a function", ErrInvalid)
	}
	name := entityName(stream, entity, fencedlock.MaxNameLen-f.prefix)
	err = f.locker.Do(ctx, name, func(_ context.Context, lease fencedlock.Lease) error {
		var err error
		applied, err = f.apply(ctx, name, lease.Token, seq, fn)
		return err
	})
	if applied {
		return true, nil // committed: a release error only delays the next holder
	}
	return false, err
}

// apply is Apply's work under the lease of token.
func (f *Fenced) apply(ctx context.Context, name string, token, seq int64, fn ApplyFunc) (bool, error) {
	after, err := f.read(ctx, name, token)
	if err != nil {
		return false, err
	}
	// The mutant is asked first, so that its site counts every skip
	// decision, not only the ones that skip.
	if !failpoint.Mutant("kafkawriter.fenced.skip.seq") && seq <= after {
		return false, nil
	}
	err = pgx.BeginFunc(ctx, f.db, func(tx pgx.Tx) error {
		ptx := &pipelinedTx{Tx: tx, f: f, name: name, token: token, seq: seq}
		if err := contain(func() error { return fn(ctx, ptx, after) }); err != nil {
			return err
		}
		if ptx.sent {
			if ptx.wrote {
				return f.written(ctx, tx, name, token, ptx.tag)
			}
			// fn read the write's result itself (or it did not run): the
			// fenced write is idempotent, and runs again on its own.
		} else {
			// Between the handler's writes and the fenced write that
			// decides whether they commit: where a pause lets another
			// holder take over.
			failpoint.Inject(ctx, "kafkawriter.fenced.before-write")
		}
		return f.write(ctx, tx, name, token, seq)
	})
	return err == nil, err
}

// pipelinedTx is the transaction an ApplyFunc runs in: the first batch it
// sends (SendBatch) carries the fenced progress write as its last
// statement, so that a function that sends its statements in one pgx.Batch
// applies the events and records them in one round trip. The write takes the
// progress row's lock, so no newer tenure can stamp the row between it and
// the commit, wherever it falls among fn's statements.
type pipelinedTx struct {
	pgx.Tx
	f           *Fenced
	name        string
	token, seq  int64
	sent, wrote bool // the write was queued; its result was read
	tag         pgconn.CommandTag
}

// SendBatch sends b with the fenced progress write appended, the first time.
func (t *pipelinedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if !t.sent && b != nil {
		t.sent = true
		// Between fn's decision to send its writes and the fenced write
		// that decides whether they commit.
		failpoint.Inject(ctx, "kafkawriter.fenced.before-write")
		b.Queue(t.f.writeStatement(), t.name, t.seq, t.token).Exec(func(tag pgconn.CommandTag) error {
			t.wrote, t.tag = true, tag
			return nil
		})
	}
	return t.Tx.SendBatch(ctx, b)
}

// Unwrap returns the transaction t wraps.
func (t *pipelinedTx) Unwrap() pgx.Tx { return t.Tx }

// read is the fenced read: it stamps the entity's progress with token and
// returns the highest sequence number applied.
func (f *Fenced) read(ctx context.Context, name string, token int64) (int64, error) {
	read := f.sql.read
	if failpoint.Mutant("kafkawriter.fenced.read.stamp") {
		read = f.sql.mutantRead
	}
	var after int64
	err := f.db.QueryRow(ctx, read, name, token).Scan(&after)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, f.fenced(ctx, f.db, name, token)
	}
	if err != nil {
		return 0, fmt.Errorf("kafkawriter: fenced read of %s: %w", short.Quote(name), err)
	}
	return after, nil
}

// write records seq as the entity's highest applied sequence number, in tx,
// if no newer tenure has read the progress since this one did.
func (f *Fenced) write(ctx context.Context, tx pgx.Tx, name string, token, seq int64) error {
	tag, err := tx.Exec(ctx, f.writeStatement(), name, seq, token)
	if err != nil {
		return fmt.Errorf("kafkawriter: fenced write of %s: %w", short.Quote(name), err)
	}
	return f.written(ctx, tx, name, token, tag)
}

// writeStatement is the fenced write's statement, whose parameters are the
// entity's name, the sequence number and the token.
func (f *Fenced) writeStatement() string {
	if failpoint.Mutant("kafkawriter.fenced.write.token") {
		return f.sql.mutantWrite
	}
	return f.sql.write
}

// written returns nil if the fenced write's tag says it wrote the row, or
// the *fencedlock.FencedError of its refusal.
func (f *Fenced) written(ctx context.Context, tx pgx.Tx, name string, token int64, tag pgconn.CommandTag) error {
	if tag.RowsAffected() == 1 {
		return nil
	}
	return f.fenced(ctx, tx, name, token)
}

// fenced returns the *fencedlock.FencedError of a refused read or write.
func (f *Fenced) fenced(ctx context.Context, db DB, name string, token int64) error {
	var current int64
	if err := db.QueryRow(ctx, f.sql.token, name).Scan(&current); err != nil {
		return fmt.Errorf("kafkawriter: fenced access to %s: %w", short.Quote(name), err)
	}
	return &fencedlock.FencedError{Presented: token, Required: current}
}
