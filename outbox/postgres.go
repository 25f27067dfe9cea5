package outbox

import (
	"context"
	"embed"
	"fmt"
	"reflect"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/fence"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
	"github.com/lockfree-go/lockfree/partition"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema of the PostgreSQL backend, for migrate.Up
// and migrate.Print (or `lockfree migrate`): the fence functions and the
// partition tables (packages "fence" and "partition": the relays are a
// partition fleet), then the outbox's tables. Give the outbox its own
// Tables prefix if the application runs a partition fleet of its own: the
// relays would otherwise join it.
func Migrations() []migrate.Migration {
	return append(partition.Migrations(), migrate.FromDir("outbox", migrationFiles, "migrations")...)
}

// DB is what the PostgreSQL backend needs from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it, so Write can run in
// the caller's transaction (WithDB).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// PostgresConfig configures a Postgres store. A nil *PostgresConfig means
// the defaults.
type PostgresConfig struct {
	// Tables says where the outbox's tables and its relays' partition
	// tables live. Defaults to the connection's search_path and the prefix
	// "lockfree_".
	Tables migrate.Names
	// Partitions is the number of partitions entity keys hash to: the
	// relays' unit of work and of handoff. Every writer and relay of an
	// outbox must use the same; change it only with the outbox drained (a
	// relay refuses to start while an event sits in a partition at or
	// above it). At most MaxPartitions. Defaults to DefaultPartitions (32).
	Partitions int
	// MaxEventBytes bounds an event's key, ID, payload and headers
	// together, each header counting HeaderOverhead more; Write refuses a
	// larger one. A relay refuses to start on a topic whose
	// max.message.bytes cannot hold such an event. Defaults to
	// DefaultMaxEventBytes (1,000,000).
	MaxEventBytes int
}

// The statements of the Postgres store, rendered once per store.
//
// Write is one statement: it raises the entity's sequence (taking the
// entity's row until the transaction ends), then inserts the event with
// that sequence; the event's id is drawn after the row was taken, so an
// entity's ids follow its sequences. A relay reads a partition in id
// order and deletes what it published with its epoch's condition
// (partition.Postgres.Condition), which share-locks the partition's
// ownership row: a takeover's claim waits for the delete to commit.
const (
	sqlWrite = `WITH s AS (
		INSERT INTO {{outbox_sequences}} AS s (key, seq) VALUES ($1, {{fence_next}}(NULL))
		ON CONFLICT (key) DO UPDATE SET seq = {{fence_next}}(s.seq)
		RETURNING seq)
	INSERT INTO {{outbox_events}} (partition, key, seq, event_id, payload, header_keys, header_values, created_at)
	SELECT $2, $1, s.seq, $3, $4, $5, $6, clock_timestamp() FROM s
	RETURNING id, seq, created_at`
	sqlBusy = `SELECT p FROM unnest($1::int[]) AS p
		WHERE EXISTS (SELECT FROM {{outbox_events}} e WHERE e.partition = p)`
	sqlPending = `SELECT id, key, seq, event_id, payload, header_keys, header_values, created_at
		FROM {{outbox_events}} WHERE partition = $1 ORDER BY id LIMIT $2`
	// sqlPublished's %s is the epoch's condition, parameters $3 to $5.
	sqlPublished = `DELETE FROM {{outbox_events}} WHERE partition = $1 AND id = ANY($2) AND %s`
	sqlHighest   = `SELECT coalesce(max(partition), -1) FROM {{outbox_events}}`
)

// Unsafe variants for the mutant sites (failpoint.Mutant): dead code in
// default builds. They keep the parameters of the statements they replace.
const (
	// mutantWrite reads the entity's sequence without taking its row, and
	// leaves it as it is.
	mutantWrite = `INSERT INTO {{outbox_events}} (partition, key, seq, event_id, payload, header_keys, header_values, created_at)
	SELECT $2, $1, coalesce((SELECT seq FROM {{outbox_sequences}} WHERE key = $1), 0) + 1, $3, $4, $5, $6, clock_timestamp()
	RETURNING id, seq, created_at`
)

type pgStatements struct {
	write, busy, pending, highest string
	mutantWrite                   string
}

// Postgres is the outbox in PostgreSQL. Create it with NewPostgres; the
// zero value is not usable. It is safe for concurrent use.
type Postgres struct {
	db      DB
	tables  migrate.Names
	cfg     storeConfig
	ring    *partition.Ring
	members *partition.Postgres
	sql     pgStatements
}

// NewPostgres returns the outbox on db (a *pgxpool.Pool: the relays need
// one; WithDB gives a copy on a transaction for Write). The schema must have
// been migrated (Migrations). A nil cfg means the defaults. A nil db or a
// bad cfg give an error matching ErrInvalid (and migrate.ErrInvalidName for
// Tables). It does no I/O.
func NewPostgres(db DB, cfg *PostgresConfig) (*Postgres, error) {
	var c PostgresConfig
	if cfg != nil {
		c = *cfg
	}
	if isNil(db) {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	if err := c.Tables.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	sc := storeConfig{partitions: c.Partitions, maxEventBytes: c.MaxEventBytes}.withDefaults()
	if err := sc.validate(); err != nil {
		return nil, err
	}
	members, err := partition.NewPostgres(db, &partition.PostgresConfig{Tables: c.Tables})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	r := func(s string) string { return migrate.Render(s, c.Tables) }
	return &Postgres{
		db: db, tables: c.Tables, cfg: sc, ring: sc.ring(), members: members,
		sql: pgStatements{
			write: r(sqlWrite), busy: r(sqlBusy), pending: r(sqlPending), highest: r(sqlHighest),
			mutantWrite: r(mutantWrite),
		},
	}, nil
}

// WithDB returns a copy of the store whose statements run on db —
// typically the caller's transaction, so that Write commits or rolls back
// with the caller's own writes — with the same configuration. Give a relay
// the store on a pool, not such a copy.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	c.members = p.members.WithDB(db)
	return &c
}

// Partitions implements Store.
func (p *Postgres) Partitions() int { return p.cfg.partitions }

// Write adds ev to the outbox, on the store's DB: with WithDB(tx), in the
// caller's transaction tx, so that the event is published if and only if tx
// commits. It raises the entity's sequence in the same statement; another
// transaction writing an event of the same entity waits until this one ends.
// Bad input gives an error matching ErrInvalid, before anything is written.
// A sequence the database cannot mint gives a *FenceError (ErrFenceEra,
// ErrFenceReadOnly); any error leaves the caller's transaction aborted, as
// a failed statement does.
func (p *Postgres) Write(ctx context.Context, ev Event) (Record, error) {
	ev, err := prepare(ev, p.cfg.maxEventBytes)
	if err != nil {
		return Record{}, err
	}
	rec := Record{Event: ev, Partition: p.ring.Partition(ev.Key)}
	keys, values := make([]string, len(ev.Headers)), make([][]byte, len(ev.Headers))
	for i, h := range ev.Headers {
		keys[i], values[i] = h.Key, h.Value
	}
	write := p.sql.write
	if failpoint.Mutant("outbox.write.seq") {
		write = p.sql.mutantWrite
	}
	err = p.db.QueryRow(ctx, write, ev.Key, rec.Partition, ev.ID, ev.Payload, keys, values).Scan(&rec.pos, &rec.Seq, &rec.Created)
	if err != nil {
		return Record{}, fmt.Errorf("outbox: write %s: %w", short.Quote(ev.Key), fence.Check(err, p.tables))
	}
	return rec, nil
}

func (p *Postgres) membership() partition.Membership { return p.members }

func (p *Postgres) config() storeConfig { return p.cfg }

func (p *Postgres) busy(ctx context.Context, ps []int) ([]int, error) {
	rows, err := p.db.Query(ctx, p.sql.busy, ps)
	if err != nil {
		return nil, fmt.Errorf("outbox: look for events: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("outbox: look for events: %w", err)
	}
	return out, nil
}

func (p *Postgres) pending(ctx context.Context, part, limit int) ([]Record, error) {
	rows, err := p.db.Query(ctx, p.sql.pending, part, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: read partition %d: %w", part, err)
	}
	var out []Record
	var r Record
	var keys []string
	var values [][]byte
	_, err = pgx.ForEachRow(rows, []any{&r.pos, &r.Key, &r.Seq, &r.ID, &r.Payload, &keys, &values, &r.Created}, func() error {
		r.Partition = part
		r.Headers = nil
		for i := range keys {
			r.Headers = append(r.Headers, kafka.Header{Key: keys[i], Value: values[i]})
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: read partition %d: %w", part, err)
	}
	return out, nil
}

func (p *Postgres) published(ctx context.Context, e partition.Epoch, recs []Record) error {
	ids := make([]int64, len(recs))
	for i, r := range recs {
		ids[i] = r.pos
	}
	cond, args := p.members.Condition(e, 3)
	stmt := fmt.Sprintf(migrate.Render(sqlPublished, p.tables), cond)
	tag, err := p.db.Exec(ctx, stmt, append([]any{e.Partition, ids}, args...)...)
	if err != nil {
		return fmt.Errorf("outbox: delete published events of partition %d: %w", e.Partition, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	// Nothing deleted: a newer owner, or (never with this relay) the rows
	// gone already.
	if err := p.members.Check(ctx, e); err != nil {
		return err
	}
	return nil
}

func (p *Postgres) highest(ctx context.Context) (int, error) {
	var h int
	if err := p.db.QueryRow(ctx, p.sql.highest).Scan(&h); err != nil {
		return 0, fmt.Errorf("outbox: highest partition: %w", err)
	}
	return h, nil
}

// isNil reports whether v is nil, or a nil pointer in an interface.
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

// inTransaction reports whether db is a transaction, which a relay cannot
// use: it needs connections of its own.
func inTransaction(db DB) bool {
	_, ok := db.(pgx.Tx)
	return ok
}
