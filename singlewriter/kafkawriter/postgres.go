package kafkawriter

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the package's schema (the fence functions, package
// "fence", shared with every lockfree package that mints fences and applied
// once; the inbox table, the fenced twin's progress table, and the tables
// of Dedupe: event IDs and entity sequences), for
// migrate.Up and migrate.Print (or `lockfree migrate --packages
// singlewriter`). The set keeps the name "singlewriter", under which
// installations made before this package was split out recorded it, so
// migrate.Up does not apply it twice.
func Migrations() []migrate.Migration {
	return append(fence.Migrations(), migrate.FromDir("singlewriter", migrationFiles, "migrations")...)
}

// DB is what the inbox and the fenced twin need from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxDB is a DB that can start transactions (*pgxpool.Pool, *pgx.Conn): the
// consumers open one per batch of messages.
type TxDB interface {
	DB
	Begin(ctx context.Context) (pgx.Tx, error)
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

// The inbox's statements. The claim takes the row lock: an old owner's
// transaction that has already advanced the row commits first, and the claim
// reads its offset. Epochs are minted in the fence era of the server the
// claim runs on (fence_next; see ErrFenceEra), so an epoch claimed after a
// failover exceeds every epoch claimed before it, and a row lost with the
// old primary's WAL and inserted again starts in the new era. Rows claimed
// by an earlier version (epoch + 1) need no migration: fence_next(epoch) is
// at least epoch + 1.
const (
	sqlClaim = `INSERT INTO {{inbox_offsets}} AS i
		(group_id, topic, partition, next_offset, owner, epoch, claimed_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, {{fence_next}}(NULL), clock_timestamp(), clock_timestamp())
		ON CONFLICT (group_id, topic, partition) DO UPDATE
		SET owner = EXCLUDED.owner, epoch = {{fence_next}}(i.epoch), claimed_at = clock_timestamp()
		RETURNING next_offset, epoch`
	sqlAdvance = `UPDATE {{inbox_offsets}} SET next_offset = $6, updated_at = clock_timestamp()
		WHERE group_id = $1 AND topic = $2 AND partition = $3 AND next_offset = $4 AND epoch = $5`
	sqlCurrent = `SELECT next_offset, epoch FROM {{inbox_offsets}}
		WHERE group_id = $1 AND topic = $2 AND partition = $3`
)

// Unsafe variants for the mutant sites (failpoint.Mutant): dead code in
// default builds. They keep the parameters of the statements they replace.
const (
	mutantClaimEpoch = `INSERT INTO {{inbox_offsets}} AS i
		(group_id, topic, partition, next_offset, owner, epoch, claimed_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, {{fence_next}}(NULL), clock_timestamp(), clock_timestamp())
		ON CONFLICT (group_id, topic, partition) DO UPDATE
		SET owner = EXCLUDED.owner, claimed_at = clock_timestamp()
		RETURNING next_offset, epoch`
	mutantAdvanceOffset = `UPDATE {{inbox_offsets}} SET next_offset = $6, updated_at = clock_timestamp()
		WHERE group_id = $1 AND topic = $2 AND partition = $3 AND $4::bigint IS NOT NULL AND epoch = $5`
	mutantAdvanceEpoch = `UPDATE {{inbox_offsets}} SET next_offset = $6, updated_at = clock_timestamp()
		WHERE group_id = $1 AND topic = $2 AND partition = $3 AND next_offset = $4 AND $5::bigint IS NOT NULL`
	mutantAdvanceNeither = `UPDATE {{inbox_offsets}} SET next_offset = $6, updated_at = clock_timestamp()
		WHERE group_id = $1 AND topic = $2 AND partition = $3 AND $4::bigint IS NOT NULL AND $5::bigint IS NOT NULL`
)

// inboxStatements are the inbox's statements rendered for one Tables.
type inboxStatements struct {
	claim, advance, current string
	// Dedupe's and Purge's (dedupe.go).
	claimEvents, entitySeqs, raiseSeqs, purgeEvents string
	// The mutants' statements: used only under the lockfree_mutants tag.
	mutantClaim, mutantOffset, mutantEpoch, mutantNeither string
}

func renderInbox(n migrate.Names) inboxStatements {
	r := func(s string) string { return migrate.Render(s, n) }
	return inboxStatements{
		claim: r(sqlClaim), advance: r(sqlAdvance), current: r(sqlCurrent),
		claimEvents: r(sqlClaimEvents), entitySeqs: r(sqlEntitySeqs), raiseSeqs: r(sqlRaiseSeqs), purgeEvents: r(sqlPurgeEvents),
		mutantClaim: r(mutantClaimEpoch), mutantOffset: r(mutantAdvanceOffset), mutantEpoch: r(mutantAdvanceEpoch),
		mutantNeither: r(mutantAdvanceNeither),
	}
}

// InboxConfig configures an Inbox. A nil *InboxConfig means the defaults.
type InboxConfig struct {
	// Tables says where the inbox table lives. Defaults to the
	// connection's search_path and the prefix "lockfree_".
	Tables migrate.Names
}

// Inbox stores, per consumer group, topic and partition, the next offset to
// apply and the epoch of the partition's current owner. It is the building
// block of Consumer, exported for consumers built on other clients: Claim on
// assignment, and Advance inside each handler transaction (WithDB). It is
// safe for concurrent use; the zero Inbox is not (create it with
// NewInbox).
type Inbox struct {
	db     DB
	tables migrate.Names
	sql    inboxStatements
}

// Claim is one tenure of a partition: what Inbox.Claim returns. It is a
// value; copies are independent.
type Claim struct {
	GroupID   string
	Topic     string
	Partition int
	// Holder is the consumer that claimed the partition (the inbox row's
	// owner).
	Holder string
	// Epoch is the tenure's fencing token: strictly greater than every
	// earlier claim of the same partition by the same group.
	Epoch int64
	// Next is the stored next offset at the time of the claim: the offset
	// to seek to (kafka.FirstOffset or kafka.LastOffset before the first
	// message was applied).
	Next int64
}

// NewInbox returns an inbox on db; the schema must have been migrated
// (Migrations). A nil cfg means the defaults. A nil db or invalid Tables give
// an error matching ErrInvalid (and migrate.ErrInvalidName for Tables). It
// does no I/O.
func NewInbox(db DB, cfg *InboxConfig) (*Inbox, error) {
	var c InboxConfig
	if cfg != nil {
		c = *cfg
	}
	if isNil(db) {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	if err := c.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return &Inbox{db: db, tables: c.Tables, sql: renderInbox(c.Tables)}, nil
}

// WithDB returns a copy of the inbox whose statements run on db — typically
// the caller's transaction, so that Advance commits or rolls back with the
// caller's own writes — with the same configuration.
func (in *Inbox) WithDB(db DB) *Inbox {
	c := *in
	c.db = db
	return &c
}

// Claim makes holder the partition's owner with a new epoch and returns the
// stored next offset; start (kafka.FirstOffset or kafka.LastOffset) is
// stored when the partition has never been claimed. The previous owner's
// later Advance calls fail with a *FencedError. Call it when the partition
// is assigned, before reading any message.
func (in *Inbox) Claim(ctx context.Context, groupID, topic string, partition int, holder string, start int64) (Claim, error) {
	if err := validPartition(groupID, topic, partition); err != nil {
		return Claim{}, err
	}
	if err := validText("holder", holder); err != nil {
		return Claim{}, err
	}
	if start != kafkaFirst && start != kafkaLast {
		return Claim{}, fmt.Errorf("%w: start offset %d (want kafka.FirstOffset or kafka.LastOffset)", ErrInvalid, start)
	}
	if err := in.usable(); err != nil {
		return Claim{}, err
	}
	claim := in.sql.claim
	if failpoint.Mutant("kafkawriter.inbox.claim.epoch") {
		claim = in.sql.mutantClaim // the new owner keeps the old epoch
	}
	c := Claim{GroupID: groupID, Topic: topic, Partition: partition, Holder: holder}
	if err := in.db.QueryRow(ctx, claim, groupID, topic, partition, start, holder).Scan(&c.Next, &c.Epoch); err != nil {
		return Claim{}, fmt.Errorf("kafkawriter: claim %s/%d: %w", short.Quote(topic), partition, fence.Check(err, in.tables))
	}
	return c, nil
}

// kafka.FirstOffset and kafka.LastOffset, the starts a never-claimed
// partition may have.
const (
	kafkaFirst = -2
	kafkaLast  = -1
)

func validPartition(groupID, topic string, partition int) error {
	if err := validText("group id", groupID); err != nil {
		return err
	}
	if err := validText("topic", topic); err != nil {
		return err
	}
	if partition < 0 {
		return fmt.Errorf("%w: partition %d", ErrInvalid, partition)
	}
	return nil
}

func (in *Inbox) usable() error {
	if in == nil || isNil(in.db) {
		return fmt.Errorf("%w: inbox without a DB", ErrInvalid)
	}
	return nil
}

// Advance moves the claim's partition from expected to next. It changes the
// row only if the stored offset is expected and the stored epoch is
// c.Epoch; otherwise it returns a *FencedError (a newer owner claimed the
// partition) or a *StaleOffsetError (the stored offset moved), and the
// caller must roll back. Run it on the caller's transaction
// (in.WithDB(tx).Advance), so that it commits or rolls back with the
// caller's writes.
func (in *Inbox) Advance(ctx context.Context, c Claim, expected, next int64) error {
	if err := in.usable(); err != nil {
		return err
	}
	if next < 0 || next <= expected {
		return fmt.Errorf("%w: advance %s/%d from %d to %d", ErrInvalid, short.Quote(c.Topic), c.Partition, expected, next)
	}
	advance := in.sql.advance
	switch offset, epoch := failpoint.Mutant("kafkawriter.inbox.advance.offset"), failpoint.Mutant("kafkawriter.inbox.advance.epoch"); {
	case offset && epoch:
		advance = in.sql.mutantNeither
	case offset:
		advance = in.sql.mutantOffset
	case epoch:
		advance = in.sql.mutantEpoch
	}
	tag, err := in.db.Exec(ctx, advance, c.GroupID, c.Topic, c.Partition, expected, c.Epoch, next)
	if err != nil {
		return fmt.Errorf("kafkawriter: advance %s/%d: %w", short.Quote(c.Topic), c.Partition, err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	stored, epoch, err := in.current(ctx, c)
	if err != nil {
		return err
	}
	if epoch != c.Epoch {
		return &FencedError{Topic: c.Topic, Partition: c.Partition, Presented: c.Epoch, Required: epoch}
	}
	return &StaleOffsetError{Topic: c.Topic, Partition: c.Partition, Expected: expected, Actual: stored}
}

// Offset returns the stored next offset and epoch of a partition; ok is
// false when it was never claimed.
func (in *Inbox) Offset(ctx context.Context, groupID, topic string, partition int) (next, epoch int64, ok bool, err error) {
	if err := validPartition(groupID, topic, partition); err != nil {
		return 0, 0, false, err
	}
	if err := in.usable(); err != nil {
		return 0, 0, false, err
	}
	next, epoch, err = in.current(ctx, Claim{GroupID: groupID, Topic: topic, Partition: partition})
	if errors.Is(err, errNoRow) {
		return 0, 0, false, nil
	}
	return next, epoch, err == nil, err
}

var errNoRow = errors.New("kafkawriter: inbox row missing")

func (in *Inbox) current(ctx context.Context, c Claim) (next, epoch int64, err error) {
	err = in.db.QueryRow(ctx, in.sql.current, c.GroupID, c.Topic, c.Partition).Scan(&next, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, fmt.Errorf("%w: %s/%d in group %s", errNoRow, short.Quote(c.Topic), c.Partition, short.Quote(c.GroupID))
	}
	if err != nil {
		return 0, 0, fmt.Errorf("kafkawriter: read inbox %s/%d: %w", short.Quote(c.Topic), c.Partition, err)
	}
	return next, epoch, nil
}
