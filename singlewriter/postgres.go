package singlewriter

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the package's schema (the inbox table and the fenced
// twin's progress table), for migrate.Up and migrate.Print (or `lockfree
// migrate`).
func Migrations() []migrate.Migration {
	return migrate.FromDir("singlewriter", migrationFiles, "migrations")
}

// DB is what the inbox needs from a connection: *pgxpool.Pool, *pgx.Conn and
// pgx.Tx all satisfy it, so Advance can run inside the caller's transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxDB is a DB that can start transactions: *pgxpool.Pool and *pgx.Conn.
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InboxConfig configures an Inbox. The zero value is valid.
type InboxConfig struct {
	// Tables says where the inbox table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
}

// Inbox stores, per consumer group, topic and partition, the next offset to
// apply and the epoch of the partition's current owner. It is the building
// block of Consumer, exported for consumers built on other clients. It is
// safe for concurrent use.
type Inbox struct {
	db  DB
	sql struct{ claim, advance, advanceUnguarded, current string }
}

// Claim is one tenure of a partition: what Inbox.Claim returns. It is a
// value; copies are independent.
type Claim struct {
	GroupID   string
	Topic     string
	Partition int
	Owner     string
	// Epoch is the tenure's fencing token: strictly greater than every
	// earlier claim of the same partition by the same group.
	Epoch int64
	// Next is the stored next offset at the time of the claim: the offset
	// to seek to (kafka.FirstOffset or kafka.LastOffset before the first
	// message was applied).
	Next int64
}

// NewInbox returns an inbox on db; the schema must have been migrated
// (Migrations). A nil cfg means the zero InboxConfig.
func NewInbox(db DB, cfg *InboxConfig) (*Inbox, error) {
	if cfg == nil {
		cfg = &InboxConfig{}
	}
	if isNil(db) {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	if err := cfg.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	in := &Inbox{db: db}
	r := func(s string) string { return migrate.Render(s, cfg.Tables) }
	// The claim takes the row lock: an old owner's transaction that has
	// already advanced the row commits first, and the claim reads its offset.
	in.sql.claim = r(`INSERT INTO {{inbox_offsets}} AS i
		(group_id, topic, partition, next_offset, owner, epoch, claimed_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, 1, clock_timestamp(), clock_timestamp())
		ON CONFLICT (group_id, topic, partition) DO UPDATE
		SET owner = EXCLUDED.owner, epoch = i.epoch + 1, claimed_at = clock_timestamp()
		RETURNING next_offset, epoch`)
	in.sql.advance = r(`UPDATE {{inbox_offsets}} SET next_offset = $6, updated_at = clock_timestamp()
		WHERE group_id = $1 AND topic = $2 AND partition = $3 AND next_offset = $4 AND epoch = $5`)
	in.sql.advanceUnguarded = r(`UPDATE {{inbox_offsets}} SET next_offset = $4, updated_at = clock_timestamp()
		WHERE group_id = $1 AND topic = $2 AND partition = $3`)
	in.sql.current = r(`SELECT next_offset, epoch FROM {{inbox_offsets}}
		WHERE group_id = $1 AND topic = $2 AND partition = $3`)
	return in, nil
}

// WithDB returns an inbox that runs its statements on db, with the same
// configuration.
func (in *Inbox) WithDB(db DB) *Inbox {
	c := *in
	c.db = db
	return &c
}

// isNil reports whether v is nil, or a nil pointer (map, func…) in an
// interface: either would panic at first use, long after construction.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}

func validStream(groupID, topic string, partition int) error {
	for _, f := range []struct{ what, s string }{{"group id", groupID}, {"topic", topic}} {
		if f.s == "" || len(f.s) > 255 || !utf8.ValidString(f.s) || strings.IndexByte(f.s, 0) >= 0 {
			return fmt.Errorf("%w: %s %s must be 1–255 bytes of UTF-8 without NUL", ErrInvalid, f.what, short.Quote(f.s))
		}
	}
	if partition < 0 {
		return fmt.Errorf("%w: partition %d", ErrInvalid, partition)
	}
	return nil
}

// Claim makes owner the partition's owner with a new epoch and returns the
// stored next offset; start (kafka.FirstOffset or kafka.LastOffset) is
// stored when the partition has never been claimed. The previous owner's
// later Advance calls fail with a *FencedError. Call it when the partition
// is assigned, before reading any message.
func (in *Inbox) Claim(ctx context.Context, groupID, topic string, partition int, owner string, start int64) (Claim, error) {
	if err := validStream(groupID, topic, partition); err != nil {
		return Claim{}, err
	}
	if len(owner) > 255 || !utf8.ValidString(owner) || strings.IndexByte(owner, 0) >= 0 {
		return Claim{}, fmt.Errorf("%w: owner %s must be at most 255 bytes of UTF-8 without NUL", ErrInvalid, short.Quote(owner))
	}
	if start != -1 && start != -2 {
		return Claim{}, fmt.Errorf("%w: start offset %d (want kafka.FirstOffset or kafka.LastOffset)", ErrInvalid, start)
	}
	c := Claim{GroupID: groupID, Topic: topic, Partition: partition, Owner: owner}
	err := in.db.QueryRow(ctx, in.sql.claim, groupID, topic, partition, start, owner).Scan(&c.Next, &c.Epoch)
	if err != nil {
		return Claim{}, fmt.Errorf("singlewriter: claim %s/%d: %w", topic, partition, err)
	}
	return c, nil
}

// Advance moves the claim's partition from expected to next — on the
// caller's transaction db, so that it commits or rolls back with the
// caller's own writes. It changes the row only if the stored offset is
// expected and the stored epoch is c.Epoch; otherwise it returns a
// *FencedError (a newer owner claimed the partition) or a *StaleOffsetError
// (the stored offset moved), and the caller must roll back.
func (in *Inbox) Advance(ctx context.Context, db DB, c Claim, expected, next int64) error {
	if isNil(db) {
		return fmt.Errorf("%w: advance %s/%d on a nil DB", ErrInvalid, short.Quote(c.Topic), c.Partition)
	}
	if next < 0 || next <= expected {
		return fmt.Errorf("%w: advance %s/%d from %d to %d", ErrInvalid, short.Quote(c.Topic), c.Partition, expected, next)
	}
	tag, err := db.Exec(ctx, in.sql.advance, c.GroupID, c.Topic, c.Partition, expected, c.Epoch, next)
	if err != nil {
		return fmt.Errorf("singlewriter: advance %s/%d: %w", c.Topic, c.Partition, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	stored, epoch, err := in.current(ctx, db, c)
	if err != nil {
		return err
	}
	if epoch != c.Epoch {
		return &FencedError{Topic: c.Topic, Partition: c.Partition, Presented: c.Epoch, Current: epoch}
	}
	return &StaleOffsetError{Topic: c.Topic, Partition: c.Partition, Expected: expected, Actual: stored}
}

// advanceUnguarded is the naive write of the unguarded twin: last writer wins.
func (in *Inbox) advanceUnguarded(ctx context.Context, db DB, c Claim, next int64) error {
	tag, err := db.Exec(ctx, in.sql.advanceUnguarded, c.GroupID, c.Topic, c.Partition, next)
	if err != nil {
		return fmt.Errorf("singlewriter: advance %s/%d: %w", c.Topic, c.Partition, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("singlewriter: advance %s/%d: inbox row missing", c.Topic, c.Partition)
	}
	return nil
}

// Offset returns the stored next offset and epoch of a partition; ok is
// false when it was never claimed.
func (in *Inbox) Offset(ctx context.Context, groupID, topic string, partition int) (next, epoch int64, ok bool, err error) {
	if err := validStream(groupID, topic, partition); err != nil {
		return 0, 0, false, err
	}
	next, epoch, err = in.current(ctx, in.db, Claim{GroupID: groupID, Topic: topic, Partition: partition})
	if errors.Is(err, errNoRow) {
		return 0, 0, false, nil
	}
	return next, epoch, err == nil, err
}

var errNoRow = errors.New("singlewriter: inbox row missing")

func (in *Inbox) current(ctx context.Context, db DB, c Claim) (next, epoch int64, err error) {
	err = db.QueryRow(ctx, in.sql.current, c.GroupID, c.Topic, c.Partition).Scan(&next, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, fmt.Errorf("%w: %s/%d in group %s", errNoRow, c.Topic, c.Partition, short.Quote(c.GroupID))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("singlewriter: read inbox %s/%d: %w", c.Topic, c.Partition, err)
	}
	return next, epoch, nil
}
