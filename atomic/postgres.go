package atomic

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/short"
)

// DB is what the PostgreSQL backends need from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it, so every operation can
// run inside the caller's own transaction. Only Fenced.DecrementMany calls
// Begin (on a pgx.Tx that is a savepoint).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Table names the user's own table of counters, for example
//
//	CREATE TABLE inventory (sku text PRIMARY KEY, quantity bigint NOT NULL);
//
// The key column must be text (or varchar) with a unique index — Claim
// relies on it for ON CONFLICT — and the value column a NOT NULL integer,
// bigint to use the full int64 range. Other columns need defaults for Claim
// to insert rows. Names are quoted, so they are case-sensitive and safe
// whatever they contain. A Table is a value, safe to copy and share.
type Table struct {
	// Schema qualifies Name when set. Defaults to the connection's search_path.
	Schema string
	// Name is the table. Required.
	Name string
	// Key is the key column. Required.
	Key string
	// Value is the counter column. Required.
	Value string
	// Floor is the lowest value Decrement and DecrementMany leave behind
	// (a negative floor allows credit). Defaults to 0.
	Floor int64
}

// maxIdentifier is PostgreSQL's NAMEDATALEN-1: longer names are truncated
// silently by the server.
const maxIdentifier = 63

func (t Table) validate() error {
	for _, n := range []struct{ what, name string }{
		{"schema", t.Schema}, {"table", t.Name}, {"key column", t.Key}, {"value column", t.Value},
	} {
		if n.name == "" && n.what == "schema" {
			continue
		}
		if !validIdentifier(n.name) {
			return fmt.Errorf("%w: invalid table config: %s %s", ErrInvalid, n.what, short.Quote(n.name))
		}
	}
	return nil
}

// validIdentifier reports whether name can be a PostgreSQL identifier:
// non-empty, at most maxIdentifier bytes, UTF-8 without NUL. Checked here,
// a bad name is an ErrInvalid at construction rather than a server error
// (SQLSTATE 22021) at the first statement.
func validIdentifier(name string) bool {
	return name != "" && len(name) <= maxIdentifier && utf8.ValidString(name) && !strings.ContainsRune(name, 0)
}

func (t Table) qualified() string {
	if t.Schema == "" {
		return pgx.Identifier{t.Name}.Sanitize()
	}
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// render replaces T, K and V in a statement template with the quoted table,
// key column and value column.
func (t Table) render(tmpl string) string {
	return strings.NewReplacer(
		"{T}", t.qualified(),
		"{K}", pgx.Identifier{t.Key}.Sanitize(),
		"{V}", pgx.Identifier{t.Value}.Sanitize(),
	).Replace(tmpl)
}

// Each single-key statement reports in one round trip whether it applied and
// the value it left, or — when its condition failed — the value it found; no
// row means no key. The fallback SELECT sees the statement's snapshot, which
// under READ COMMITTED can predate a concurrent change that the UPDATE
// waited for; a result that contradicts the miss is therefore re-run (see
// Postgres.conditional).
const (
	sqlDecrement = `WITH u AS (
		UPDATE {T} SET {V} = {V} - $2 WHERE {K} = $1 AND {V} >= $3 RETURNING {V})
	SELECT true, {V} FROM u
	UNION ALL
	SELECT false, {V} FROM {T} WHERE {K} = $1 AND NOT EXISTS (SELECT FROM u)`
	sqlIncrement = `WITH u AS (
		UPDATE {T} SET {V} = {V} + $2 WHERE {K} = $1 AND {V} <= $3 RETURNING {V})
	SELECT true, {V} FROM u
	UNION ALL
	SELECT false, {V} FROM {T} WHERE {K} = $1 AND NOT EXISTS (SELECT FROM u)`
	sqlCompareAndSet = `WITH u AS (
		UPDATE {T} SET {V} = $3 WHERE {K} = $1 AND {V} = $2 RETURNING {V})
	SELECT true, {V} FROM u
	UNION ALL
	SELECT false, {V} FROM {T} WHERE {K} = $1 AND NOT EXISTS (SELECT FROM u)`
	sqlSetIfGreater = `WITH u AS (
		UPDATE {T} SET {V} = $2 WHERE {K} = $1 AND {V} < $2 RETURNING {V})
	SELECT true, {V} FROM u
	UNION ALL
	SELECT false, {V} FROM {T} WHERE {K} = $1 AND NOT EXISTS (SELECT FROM u)`
	sqlClaim = `WITH i AS (
		INSERT INTO {T} ({K}, {V}) VALUES ($1, $2) ON CONFLICT ({K}) DO NOTHING RETURNING {V})
	SELECT true, {V} FROM i
	UNION ALL
	SELECT false, {V} FROM {T} WHERE {K} = $1 AND NOT EXISTS (SELECT FROM i)`
	sqlValue = `SELECT {V} FROM {T} WHERE {K} = $1`

	// sqlDecrementMany locks every requested row in key order (the sort
	// sits below the row locks, so every batch takes them in the same
	// order and none can wait on another in a cycle), decides once for the
	// whole batch, and updates only if every key exists and has enough. It
	// returns, per requested key, the value before (NULL: no row) and after
	// (NULL: not applied).
	sqlDecrementMany = `WITH req AS MATERIALIZED (
		SELECT k, a, th FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(k, a, th)
	), locked AS MATERIALIZED (
		SELECT {K} AS k, {V} AS v FROM {T} WHERE {K} = ANY($1::text[]) ORDER BY {K} FOR UPDATE
	), verdict AS MATERIALIZED (
		SELECT count(l.k) = cardinality($1::text[]) AND coalesce(bool_and(l.v >= r.th), false) AS ok
		FROM req r LEFT JOIN locked l ON l.k = r.k
	), u AS (
		UPDATE {T} t SET {V} = t.{V} - req.a
		FROM req, verdict
		WHERE verdict.ok AND t.{K} = req.k AND t.{V} >= req.th
		RETURNING t.{K} AS k, t.{V} AS v
	)
	SELECT req.k, locked.v, u.v FROM req
	LEFT JOIN locked ON locked.k = req.k
	LEFT JOIN u ON u.k = req.k`
)

// maxAttempts bounds the re-runs of a statement whose fallback read saw an
// older snapshot than its write. The concurrency suite sees such reads with
// a single attempt; a re-run usually applies the operation outright.
const maxAttempts = 32

// Postgres is a Store on the user's own table: each operation is one
// conditional statement, so it needs no lock and no transaction of its own,
// and runs as well inside the caller's transaction (WithDB). The Current of
// a refusal is the value the row held when the statement decided (read in
// the same round trip, without a lock). It is safe for concurrent use.
type Postgres struct {
	db    DB
	table Table
	sql   struct {
		decrement, increment, cas, setIfGreater, claim, value, many string
	}
}

// NewPostgres returns a store on table through db. It returns ErrInvalid
// when a name is missing or longer than PostgreSQL allows; it does not touch
// the database.
func NewPostgres(db DB, table Table) (*Postgres, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	if err := table.validate(); err != nil {
		return nil, err
	}
	p := &Postgres{db: db, table: table}
	p.sql.decrement = table.render(sqlDecrement)
	p.sql.increment = table.render(sqlIncrement)
	p.sql.cas = table.render(sqlCompareAndSet)
	p.sql.setIfGreater = table.render(sqlSetIfGreater)
	p.sql.claim = table.render(sqlClaim)
	p.sql.value = table.render(sqlValue)
	p.sql.many = table.render(sqlDecrementMany)
	return p, nil
}

// WithDB returns a store that runs its statements on db — typically the
// caller's transaction, so that a decrement commits or rolls back with the
// caller's other writes — with the same table.
func (p *Postgres) WithDB(db DB) *Postgres {
	c := *p
	c.db = db
	return &c
}

// Table returns the table the store works on.
func (p *Postgres) Table() Table { return p.table }

// conditional runs one single-key statement. It returns found=false when the
// key has no row. On a miss whose value contradicts the miss (stale(v) is
// true: the fallback read an older snapshot than the UPDATE decided on) it
// runs the statement again, which takes a new snapshot under READ COMMITTED;
// under REPEATABLE READ the UPDATE itself fails with a serialization error
// instead.
func (p *Postgres) conditional(ctx context.Context, op, key, sql string, stale func(v int64) bool, args ...any) (applied, found bool, v int64, err error) {
	for attempt := 1; ; attempt++ {
		err = p.db.QueryRow(ctx, sql, args...).Scan(&applied, &v)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, false, 0, nil
		}
		if err != nil {
			return false, false, 0, fmt.Errorf("atomic: %s %s: %w", op, short.Quote(key), err)
		}
		if applied || !stale(v) || attempt == maxAttempts {
			return applied, true, v, nil
		}
	}
}

// Decrement implements Store with one UPDATE … WHERE value >= floor + amount.
func (p *Postgres) Decrement(ctx context.Context, key string, amount int64) (int64, error) {
	threshold, err := decrementThreshold(key, amount, p.table.Floor)
	if err != nil {
		return 0, err
	}
	applied, found, v, err := p.conditional(ctx, OpDecrement, key, p.sql.decrement,
		func(v int64) bool { return v >= threshold }, key, amount, threshold)
	switch {
	case err != nil:
		return 0, err
	case !found:
		return 0, notFound(key)
	case !applied:
		return 0, &InsufficientError{Op: OpDecrement, Key: key, Current: v, Amount: amount, Bound: p.table.Floor}
	}
	return v, nil
}

// Increment implements Store with one UPDATE … WHERE value <= limit - amount.
func (p *Postgres) Increment(ctx context.Context, key string, amount, limit int64) (int64, error) {
	ceiling, err := incrementCeiling(key, amount, limit)
	if err != nil {
		return 0, err
	}
	applied, found, v, err := p.conditional(ctx, OpIncrement, key, p.sql.increment,
		func(v int64) bool { return v <= ceiling }, key, amount, ceiling)
	switch {
	case err != nil:
		return 0, err
	case !found:
		return 0, notFound(key)
	case !applied:
		return 0, incrementMiss(key, amount, limit, v)
	}
	return v, nil
}

// CompareAndSet implements Store with one UPDATE … WHERE value = old.
func (p *Postgres) CompareAndSet(ctx context.Context, key string, old, next int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	applied, found, v, err := p.conditional(ctx, OpCompareAndSet, key, p.sql.cas,
		func(v int64) bool { return v == old }, key, old, next)
	switch {
	case err != nil:
		return err
	case !found:
		return notFound(key)
	case !applied:
		return &ConflictError{Op: OpCompareAndSet, Key: key, Offered: old, Current: v}
	}
	return nil
}

// SetIfGreater implements Store with one UPDATE … WHERE value < new.
func (p *Postgres) SetIfGreater(ctx context.Context, key string, value int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	applied, found, v, err := p.conditional(ctx, OpSetIfGreater, key, p.sql.setIfGreater,
		func(v int64) bool { return v < value }, key, value)
	switch {
	case err != nil:
		return err
	case !found:
		return notFound(key)
	case !applied:
		return &ConflictError{Op: OpSetIfGreater, Key: key, Offered: value, Current: v}
	}
	return nil
}

// Claim implements Store with one INSERT … ON CONFLICT (key) DO NOTHING. A
// concurrent claim of the same key waits on the unique index and then loses.
func (p *Postgres) Claim(ctx context.Context, key string, value int64) error {
	if err := validKey(key); err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		applied, found, v, err := p.conditional(ctx, OpClaim, key, p.sql.claim,
			func(int64) bool { return false }, key, value)
		switch {
		case err != nil:
			return err
		case applied:
			return nil
		case found:
			return &ConflictError{Op: OpClaim, Key: key, Offered: value, Current: v}
		case attempt == maxAttempts:
			return fmt.Errorf("atomic: claim %s: the conflicting row stayed invisible after %d attempts", short.Quote(key), attempt)
		}
		// Neither inserted nor visible: the conflicting row committed after
		// this statement's snapshot. Run it again with a new one.
	}
}

// DecrementMany implements Store in one statement that locks the batch's
// rows in key order, checks them all, and updates them all or none.
func (p *Postgres) DecrementMany(ctx context.Context, amounts map[string]int64) (map[string]int64, error) {
	b, err := newBatch(amounts, p.table.Floor)
	if err != nil {
		return nil, err
	}
	rows, err := p.db.Query(ctx, p.sql.many, b.keys, b.amounts, b.thresholds)
	if err != nil {
		return nil, fmt.Errorf("atomic: %s: %w", OpDecrementMany, err)
	}
	before := make(map[string]*int64, len(b.keys))
	after := make(map[string]int64, len(b.keys))
	for rows.Next() {
		var (
			k      string
			bv, av *int64
		)
		if err := rows.Scan(&k, &bv, &av); err != nil {
			rows.Close()
			return nil, fmt.Errorf("atomic: %s: %w", OpDecrementMany, err)
		}
		before[k] = bv
		if av != nil {
			after[k] = *av
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("atomic: %s: %w", OpDecrementMany, err)
	}
	if len(after) == len(b.keys) {
		return after, nil
	}
	if len(after) > 0 {
		// Cannot happen: the statement updates all rows or none.
		return nil, fmt.Errorf("atomic: %s: partial update of %d of %d keys", OpDecrementMany, len(after), len(b.keys))
	}
	for i, k := range b.keys {
		bv := before[k]
		switch {
		case bv == nil:
			return nil, notFound(k)
		case *bv < b.thresholds[i]:
			return nil, &InsufficientError{Op: OpDecrementMany, Key: k, Current: *bv, Amount: b.amounts[i], Bound: p.table.Floor}
		}
	}
	return nil, fmt.Errorf("atomic: %s: batch refused although every key had enough", OpDecrementMany)
}

// Value implements Store.
func (p *Postgres) Value(ctx context.Context, key string) (int64, error) {
	if err := validKey(key); err != nil {
		return 0, err
	}
	var v int64
	err := p.db.QueryRow(ctx, p.sql.value, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(key)
	}
	if err != nil {
		return 0, fmt.Errorf("atomic: value %s: %w", short.Quote(key), err)
	}
	return v, nil
}
