package atomic

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

// DB is what the PostgreSQL backend needs from a connection: *pgxpool.Pool,
// *pgx.Conn and pgx.Tx all satisfy it, so every operation can run inside
// the caller's own transaction (Postgres.WithDB).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// TxDB is a DB that can open a transaction, which Fenced.DecrementMany
// needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx (where Begin is a savepoint)
// satisfy it.
type TxDB interface {
	DB
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
	// MeterProvider receives the metrics of the stores on this table
	// (Postgres, Fenced; docs/atomic.md, "Metrics"). Defaults to none:
	// nothing is recorded.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per operation of the stores on this
	// table. Defaults to none: no span is started.
	TracerProvider trace.TracerProvider
	// Tables says where the operations table of operation IDs (WithID,
	// Migrations) lives. Defaults to the connection's search_path and the
	// prefix "lockfree_".
	Tables migrate.Names
	// Retention is how long an operation ID is good after the time it
	// carries: within it, a retry with the ID returns the recorded outcome;
	// after it, the ID is refused (ErrExpired) and Purge may delete its
	// record. Every process using the operations table must use the same
	// Retention. At least one second. Defaults to 24 hours.
	Retention time.Duration
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
	if err := t.Tables.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return validRetention(t.Retention)
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

// where is the table's identity in fingerprints: the table as
// configured, its key and value columns.
func (t Table) where() string {
	return t.qualified() + "." + pgx.Identifier{t.Key}.Sanitize() + "." + pgx.Identifier{t.Value}.Sanitize()
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

// The single-key statements are the bare conditional statements, each
// wrapped so that the same statement answers a refusal: when the change
// applies it returns (true, the new value); when it is refused, (false, the
// value the statement's snapshot holds); when the key has no row, nothing.
// The read runs only when the change returned no row (its NOT EXISTS is a
// one-time filter), so an operation that applies costs what the bare
// statement costs, and a refusal or a missing key costs no second round
// trip.
//
// The snapshot's value is the one the change was refused on, with one
// exception: under READ COMMITTED, a change that finds the row changed by a
// transaction that committed after the snapshot re-checks its condition on
// the newest version, which the read does not see. Then the snapshot's
// value passes the condition that the newest version failed, and the
// store runs the statement again (refusalRead).
const (
	answerHead       = `WITH u AS (`
	answerTail       = `) SELECT true, {V} FROM u UNION ALL SELECT false, {V} FROM {T} WHERE {K} = $1 AND NOT EXISTS (SELECT FROM u)`
	sqlDecrement     = answerHead + `UPDATE {T} SET {V} = {V} - $2 WHERE {K} = $1 AND {V} >= $3 RETURNING {V}` + answerTail
	sqlIncrement     = answerHead + `UPDATE {T} SET {V} = {V} + $2 WHERE {K} = $1 AND {V} <= $3 RETURNING {V}` + answerTail
	sqlCompareAndSet = answerHead + `UPDATE {T} SET {V} = $3 WHERE {K} = $1 AND {V} = $2 RETURNING {V}` + answerTail
	sqlSetIfGreater  = answerHead + `UPDATE {T} SET {V} = $2 WHERE {K} = $1 AND {V} < $2 RETURNING {V}` + answerTail
	sqlClaim         = answerHead + `INSERT INTO {T} ({K}, {V}) VALUES ($1, $2) ON CONFLICT ({K}) DO NOTHING RETURNING {V}` + answerTail
	sqlValue         = `SELECT {V} FROM {T} WHERE {K} = $1`

	// sqlDecrementMany locks every requested row in key order (the sort
	// sits below the row locks, so every batch takes them in the same
	// order and none can wait on another in a cycle), decides once for the
	// whole batch, and updates only if every key exists and has enough. It
	// returns, per requested key, the value before (NULL: no row) and after
	// (NULL: not applied). The update decides on the values the locks
	// returned (l.v), never on the row as the statement's snapshot saw it:
	// under READ COMMITTED a row changed by a transaction that committed
	// after the snapshot and before the lock is filtered out on its old
	// value, before the update looks at its new one, so a condition on
	// t.value would skip a row the verdict counted and apply the batch in
	// part.
	sqlDecrementMany = `WITH req AS MATERIALIZED (
		SELECT k, a, th FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS r(k, a, th)
	), locked AS MATERIALIZED (
		SELECT {K} AS k, {V} AS v FROM {T} WHERE {K} = ANY($1::text[]) ORDER BY {K} FOR UPDATE
	), verdict AS MATERIALIZED (
		SELECT count(l.k) = cardinality($1::text[]) AND coalesce(bool_and(l.v >= r.th), false) AS ok
		FROM req r LEFT JOIN locked l ON l.k = r.k
	), u AS (
		UPDATE {T} t SET {V} = t.{V} - req.a
		FROM req JOIN locked l ON l.k = req.k, verdict
		WHERE verdict.ok AND t.{K} = req.k AND l.v >= req.th
		RETURNING t.{K} AS k, t.{V} AS v
	)
	SELECT req.k, locked.v, u.v FROM req
	LEFT JOIN locked ON locked.k = req.k
	LEFT JOIN u ON u.k = req.k`
)

// sqlApplyInOrder locks the rows of the step's keys ($1, every key once)
// in key order (cur), folds the operations over their values in order with
// the function atomic.Migrations installs ({F}: its comment gives the
// operations' encoding, $2 to $8), and writes each key whose value changed
// once. It returns, per operation, whether it applied and the values after
// it. The fold decides on the values the locks returned, never on the rows
// as the statement's snapshot saw them (see sqlDecrementMany).
const sqlApplyInOrder = `WITH cur AS MATERIALIZED (
		SELECT {K} AS k, {V} AS v FROM {T} WHERE {K} = ANY($1::text[]) ORDER BY {K} FOR NO KEY UPDATE
	), fold AS MATERIALIZED (
		SELECT f.n, f.ok, f.after FROM {F}(
			ARRAY(SELECT cur.v FROM unnest($1::text[]) WITH ORDINALITY AS q(k, i) LEFT JOIN cur ON cur.k = q.k ORDER BY q.i),
			$2::int2[], $3::int4[], $4::bigint[], $5::bigint[], $6::int4[], $7::bigint[], $8::bigint[]) AS f
	), u AS (
		UPDATE {T} t SET {V} = fin.after[q.i]
		FROM (SELECT after FROM fold ORDER BY n DESC LIMIT 1) fin, unnest($1::text[]) WITH ORDINALITY AS q(k, i), cur
		WHERE t.{K} = q.k AND cur.k = q.k AND fin.after[q.i] IS DISTINCT FROM cur.v
	)
	SELECT ok, after FROM fold ORDER BY n`

// inOrderFunction is the fold's base name in atomic.Migrations.
const inOrderFunction = "atomic_apply_in_order"

// Unsafe variants for the mutant sites (internal/failpoint): dead code in
// default builds. Each drops one condition and keeps the parameters of the
// statement it replaces.
const (
	mutantDecrement     = answerHead + `UPDATE {T} SET {V} = {V} - $2 WHERE {K} = $1 AND $3::bigint IS NOT NULL RETURNING {V}` + answerTail
	mutantIncrement     = answerHead + `UPDATE {T} SET {V} = {V} + $2 WHERE {K} = $1 AND $3::bigint IS NOT NULL RETURNING {V}` + answerTail
	mutantCompareAndSet = answerHead + `UPDATE {T} SET {V} = $3 WHERE {K} = $1 AND $2::bigint IS NOT NULL RETURNING {V}` + answerTail
	mutantSetIfGreater  = answerHead + `UPDATE {T} SET {V} = $2 WHERE {K} = $1 RETURNING {V}` + answerTail
	mutantClaim         = answerHead + `INSERT INTO {T} ({K}, {V}) VALUES ($1, $2) ON CONFLICT ({K}) DO UPDATE SET {V} = excluded.{V} RETURNING {V}` + answerTail
	// mutantManyVerdict is removed from sqlDecrementMany: each key with
	// enough is then updated whether or not the others have enough.
	mutantManyVerdict = `verdict.ok AND `
)

// maxAttempts bounds the runs of a statement whose refusal its own read
// contradicts: the change re-checked a newer row version than the read's
// snapshot holds (READ COMMITTED), so the read's value does not explain the
// refusal. The statement then runs again on a new snapshot, and usually
// applies or is refused on a value that explains it.
const maxAttempts = 32

// Postgres is a Store on the user's own table: each operation is one
// conditional statement, so it needs no lock and no transaction of its own,
// and runs as well inside the caller's transaction (WithDB). The same
// statement reads the value that a refusal reports: the value it was
// refused on. It is safe for concurrent use.
type Postgres struct {
	db        DB
	table     Table
	where     string // the table's identity in fingerprints
	sql       pgStatements
	ids       idStatements
	retention time.Duration
	tel       *storeTelemetry
	mutated   *mutatedFolds // in builds with mutants only (inOrderStatement)
}

// pgStatements are the statements of one table, rendered once per store.
type pgStatements struct {
	decrement, increment, cas, setIfGreater, claim, value, many, inOrder string
}

func renderStatements(t Table) pgStatements {
	return pgStatements{
		decrement: t.render(sqlDecrement), increment: t.render(sqlIncrement),
		cas: t.render(sqlCompareAndSet), setIfGreater: t.render(sqlSetIfGreater),
		claim: t.render(sqlClaim), value: t.render(sqlValue), many: t.render(sqlDecrementMany),
		inOrder: strings.ReplaceAll(t.render(sqlApplyInOrder), "{F}", t.Tables.Table(inOrderFunction)),
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
	return &Postgres{db: db, table: table, where: table.where(), sql: renderStatements(table), ids: table.renderIDs(),
		retention: retentionOr(table.Retention), tel: newTelemetry(table.MeterProvider, table.TracerProvider),
		mutated: &mutatedFolds{made: map[string]bool{}}}, nil
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

// valueOf turns what an operation with an ID decided into its answer,
// and tells the operation's telemetry whether it was a replay.
func (p *Postgres) valueOf(d decided, err error) func(op *started) (int64, error) {
	return func(op *started) (int64, error) {
		op.replayed = d.replayed
		if err != nil {
			return 0, err
		}
		return d.out.Value, d.out.Err
	}
}

// answer is what one single-key statement said: applied with the new
// value, refused with the value its snapshot held, or (found false) no row
// for the key in its snapshot.
type answer struct {
	applied, found bool
	value          int64
}

// run sends one single-key statement (sqlDecrement and its kin) with args,
// key first.
func (p *Postgres) run(ctx context.Context, op, sql, key string, args ...any) (answer, error) {
	var a answer
	err := p.db.QueryRow(ctx, sql, append([]any{key}, args...)...).Scan(&a.applied, &a.value)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return answer{}, nil
	case err != nil:
		return answer{}, fmt.Errorf("atomic: %s %s: %w", op, short.Quote(key), err)
	}
	a.found = true
	return a, nil
}

// refusalRead reports whether a refusal's value explains it (refused(v) is
// true of it), so that the store may report it; otherwise the change was
// refused on a newer row version than the read saw (maxAttempts), and the
// store runs the statement again. The mutant site reports the read's value
// whatever it is.
func refusalRead(refused bool) bool {
	return refused || failpoint.Mutant("atomic.refusal.recheck")
}

// Decrement implements Store with one
// UPDATE … SET value = value - amount WHERE key = $1 AND value >= floor + amount RETURNING value.
//
// With an ID (WithID) it is one statement too, which locks the row, decides
// on its latest value, records the outcome and applies it
// (docs/atomic.md, "Operation IDs").
func (p *Postgres) Decrement(ctx context.Context, key string, amount int64, opts ...Option) (_ int64, err error) {
	ctx, op := p.tel.start(ctx, opDecrement)
	defer func() { op.end(ctx, err) }()
	threshold, err := decrementThreshold(key, amount, p.table.Floor)
	if err != nil {
		return 0, err
	}
	if c, ok, err := newCall(opts, p.where, OpDecrement, key, amount, p.table.Floor, amount); ok || err != nil {
		if err != nil {
			return 0, err
		}
		sql := p.ids.decrement
		if failpoint.Mutant("atomic.decrement.floor") {
			sql = strings.Replace(sql, `c.v >= $3::bigint`, `$3::bigint IS NOT NULL`, 2)
		}
		return p.valueOf(p.do(ctx, c, sql, amount, threshold))(&op)
	}
	sql := p.sql.decrement
	if failpoint.Mutant("atomic.decrement.floor") {
		sql = p.table.render(mutantDecrement)
	}
	for attempt := 1; ; attempt++ {
		a, err := p.run(ctx, OpDecrement, sql, key, amount, threshold)
		switch {
		case err != nil:
			return 0, err
		case a.applied:
			return a.value, nil
		case !a.found:
			return 0, notFound(key)
		case refusalRead(a.value < threshold) || attempt == maxAttempts:
			return 0, &InsufficientError{Op: OpDecrement, Key: key, Actual: a.value, Amount: amount, Bound: p.table.Floor}
		}
	}
}

// Increment implements Store with one
// UPDATE … SET value = value + amount WHERE key = $1 AND value <= limit - amount RETURNING value.
func (p *Postgres) Increment(ctx context.Context, key string, amount, limit int64, opts ...Option) (_ int64, err error) {
	ctx, op := p.tel.start(ctx, opIncrement)
	defer func() { op.end(ctx, err) }()
	ceiling, err := incrementCeiling(key, amount, limit)
	if err != nil {
		return 0, err
	}
	if c, ok, err := newCall(opts, p.where, OpIncrement, key, amount, limit, amount, limit); ok || err != nil {
		if err != nil {
			return 0, err
		}
		sql := p.ids.increment
		if failpoint.Mutant("atomic.increment.cap") {
			sql = strings.Replace(sql, `c.v <= $3::bigint`, `$3::bigint IS NOT NULL`, 2)
		}
		return p.valueOf(p.do(ctx, c, sql, amount, ceiling))(&op)
	}
	sql := p.sql.increment
	if failpoint.Mutant("atomic.increment.cap") {
		sql = p.table.render(mutantIncrement)
	}
	for attempt := 1; ; attempt++ {
		a, err := p.run(ctx, OpIncrement, sql, key, amount, ceiling)
		switch {
		case err != nil:
			return 0, err
		case a.applied:
			return a.value, nil
		case !a.found:
			return 0, notFound(key)
		case refusalRead(a.value > ceiling) || attempt == maxAttempts:
			return 0, incrementMiss(key, amount, limit, a.value)
		}
	}
}

// CompareAndSet implements Store with one UPDATE … WHERE key = $1 AND value = old.
func (p *Postgres) CompareAndSet(ctx context.Context, key string, old, next int64, opts ...Option) (err error) {
	ctx, op := p.tel.start(ctx, opCompareAndSet)
	defer func() { op.end(ctx, err) }()
	if err := validKey(key); err != nil {
		return err
	}
	if c, ok, err := newCall(opts, p.where, OpCompareAndSet, key, old, 0, old, next); ok || err != nil {
		if err != nil {
			return err
		}
		sql := p.ids.cas
		if failpoint.Mutant("atomic.cas.compare") {
			sql = strings.Replace(sql, `c.v = $2::bigint`, `$2::bigint IS NOT NULL`, 2)
		}
		_, err := p.valueOf(p.do(ctx, c, sql, old, next))(&op)
		return err
	}
	sql := p.sql.cas
	if failpoint.Mutant("atomic.cas.compare") {
		sql = p.table.render(mutantCompareAndSet)
	}
	for attempt := 1; ; attempt++ {
		a, err := p.run(ctx, OpCompareAndSet, sql, key, old, next)
		switch {
		case err != nil:
			return err
		case a.applied:
			return nil
		case !a.found:
			return notFound(key)
		case refusalRead(a.value != old) || attempt == maxAttempts:
			return &ConflictError{Op: OpCompareAndSet, Key: key, Expected: old, Actual: a.value}
		}
	}
}

// SetIfGreater implements Store with one UPDATE … WHERE key = $1 AND value < new.
func (p *Postgres) SetIfGreater(ctx context.Context, key string, value int64, opts ...Option) (err error) {
	ctx, op := p.tel.start(ctx, opSetIfGreater)
	defer func() { op.end(ctx, err) }()
	if err := validKey(key); err != nil {
		return err
	}
	if c, ok, err := newCall(opts, p.where, OpSetIfGreater, key, value, 0, value); ok || err != nil {
		if err != nil {
			return err
		}
		sql := p.ids.setIfGreater
		if failpoint.Mutant("atomic.setifgreater.compare") {
			sql = strings.Replace(sql, `c.v < $2::bigint`, `$2::bigint IS NOT NULL`, 2)
		}
		_, err := p.valueOf(p.do(ctx, c, sql, value, value))(&op)
		return err
	}
	sql := p.sql.setIfGreater
	if failpoint.Mutant("atomic.setifgreater.compare") {
		sql = p.table.render(mutantSetIfGreater)
	}
	for attempt := 1; ; attempt++ {
		a, err := p.run(ctx, OpSetIfGreater, sql, key, value)
		switch {
		case err != nil:
			return err
		case a.applied:
			return nil
		case !a.found:
			return notFound(key)
		case refusalRead(value <= a.value) || attempt == maxAttempts:
			return &ConflictError{Op: OpSetIfGreater, Key: key, Expected: value, Actual: a.value}
		}
	}
}

// Claim implements Store with one INSERT … ON CONFLICT (key) DO NOTHING. A
// concurrent claim of the same key waits on the unique index and then loses.
func (p *Postgres) Claim(ctx context.Context, key string, value int64, opts ...Option) (err error) {
	ctx, op := p.tel.start(ctx, opClaim)
	defer func() { op.end(ctx, err) }()
	if err := validKey(key); err != nil {
		return err
	}
	if c, ok, err := newCall(opts, p.where, OpClaim, key, value, 0, value); ok || err != nil {
		if err != nil {
			return err
		}
		sql := p.ids.claim
		if failpoint.Mutant("atomic.claim.conflict") {
			sql = p.table.renderOps(strings.Replace(sqlClaimID, `ON CONFLICT ({K}) DO NOTHING`, `ON CONFLICT ({K}) DO UPDATE SET {V} = excluded.{V}`, 1))
		}
		_, err := p.valueOf(p.do(ctx, c, sql, value, value))(&op)
		return err
	}
	sql := p.sql.claim
	if failpoint.Mutant("atomic.claim.conflict") {
		sql = p.table.render(mutantClaim)
	}
	for attempt := 1; ; attempt++ {
		a, err := p.run(ctx, OpClaim, sql, key, value)
		switch {
		case err != nil:
			return err
		case a.applied:
			return nil
		case a.found:
			return &ConflictError{Op: OpClaim, Key: key, Expected: value, Actual: a.value}
		case attempt == maxAttempts:
			return fmt.Errorf("atomic: claim %s: the conflicting row was out of the statement's snapshot under each of %d attempts", short.Quote(key), attempt)
		}
		// The row that conflicted committed after the statement's snapshot
		// (a concurrent claim), or was deleted: claim again.
	}
}

// DecrementMany implements Store in one statement that locks the batch's
// rows in key order, checks them all, and updates them all or none.
func (p *Postgres) DecrementMany(ctx context.Context, amounts map[string]int64, opts ...Option) (_ map[string]int64, err error) {
	ctx, op := p.tel.start(ctx, opDecrementMany)
	defer func() { op.end(ctx, err) }()
	b, err := newBatch(amounts, p.table.Floor)
	if err != nil {
		return nil, err
	}
	if c, ok, err := newCall(opts, p.where, OpDecrementMany, "", 0, p.table.Floor); ok || err != nil {
		if err != nil {
			return nil, err
		}
		c.fingerprint = manyFingerprint(p.where, b)
		d, err := p.doMany(ctx, c, b)
		op.replayed = d.replayed
		if err != nil {
			return nil, err
		}
		return d.out.Values, d.out.Err
	}
	sql := p.sql.many
	if failpoint.Mutant("atomic.decrementmany.all") {
		sql = strings.Replace(sql, mutantManyVerdict, "", 1)
	}
	rows, err := p.db.Query(ctx, sql, b.keys, b.amounts, b.thresholds)
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
			return nil, &InsufficientError{Op: OpDecrementMany, Key: k, Actual: *bv, Amount: b.amounts[i], Bound: p.table.Floor}
		}
	}
	return nil, fmt.Errorf("atomic: %s: batch refused although every key had enough", OpDecrementMany)
}

// ApplyInOrder implements InOrder in one statement, which locks the rows
// of the step's keys in key order, decides every operation in order on the
// values the locks returned, and writes each changed key once. An error
// after the statement was sent, other than one the server returned (the
// statement then rolled back), matches ErrUncertain: the reply was lost,
// and the step may have committed.
func (p *Postgres) ApplyInOrder(ctx context.Context, ops []Op) ([]Result, error) {
	r, err := newInOrder(ops, p.table.Floor)
	if err != nil {
		return nil, err
	}
	if len(r.sent) == 0 {
		return r.results, nil
	}
	pos := make(map[string]int32, len(r.keys))
	for i, k := range r.keys {
		pos[k] = int32(i + 1)
	}
	var kinds []int16
	var kis, mkis []int32
	var xs, ys, mxs, mys []int64
	for n, ms := range r.members {
		if r.ops[r.sent[n]].kind != stepDecrementMany {
			m := ms[0]
			kinds, kis, xs, ys = append(kinds, int16(m.kind)), append(kis, pos[m.key]), append(xs, m.x), append(ys, m.y)
			continue
		}
		kinds, kis = append(kinds, int16(stepDecrementMany)), append(kis, 0)
		xs, ys = append(xs, int64(len(mkis)+1)), append(ys, int64(len(mkis)+len(ms)))
		for _, m := range ms {
			mkis, mxs, mys = append(mkis, pos[m.key]), append(mxs, m.x), append(mys, m.y)
		}
	}
	sql, err := p.inOrderStatement(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := p.db.Query(ctx, sql, r.keys, kinds, kis, xs, ys, mkis, mxs, mys)
	if err != nil {
		return nil, p.inOrderError(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var ok bool
		var vals []*int64
		if err := rows.Scan(&ok, &vals); err != nil {
			return nil, p.inOrderError(err)
		}
		if n == len(r.sent) || len(vals) != len(r.keys) {
			return nil, fmt.Errorf("%w: a step of %d operations: more results than sent", ErrUncertain, len(ops))
		}
		values := map[string]int64{}
		for _, m := range r.members[n] {
			if v := vals[pos[m.key]-1]; v != nil {
				values[m.key] = *v
			}
		}
		if !ok {
			err := r.refusal(n, values)
			if err == nil {
				err = fmt.Errorf("atomic: %s refused although its condition holds", ops[r.sent[n]])
			}
			r.refuse(n, values, err)
		} else {
			r.applied(n, values)
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return nil, p.inOrderError(err)
	}
	if n != len(r.sent) {
		return nil, fmt.Errorf("%w: a step of %d operations: %d results", ErrUncertain, len(ops), n)
	}
	return r.results, nil
}

// inOrderStatement is the statement of a step. In a build with mutants,
// when the mutant of one of the fold's conditions is on, it is the same
// statement on a copy of the fold with that condition replaced, created
// once per store: the fold runs in the database, out of reach of the
// process's mutants. Dead code in default builds.
func (p *Postgres) inOrderStatement(ctx context.Context) (string, error) {
	fold := mutantFold()
	if fold == "" {
		return p.sql.inOrder, nil
	}
	sum := sha256.Sum256([]byte(fold))
	base := fmt.Sprintf("%s_%x", inOrderFunction, sum[:4])
	name := p.table.Tables.Table(base)
	p.mutated.Lock()
	defer p.mutated.Unlock()
	if !p.mutated.made[name] {
		fold = strings.Replace(strings.ReplaceAll(fold, "{{"+inOrderFunction+"}}", "{{"+base+"}}"), "CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
		// Workers starting together create it one at a time.
		do := "DO $mutant$ BEGIN PERFORM pg_advisory_xact_lock(714002); " + migrate.Render(fold, p.table.Tables) + " END $mutant$"
		if _, err := p.db.Exec(ctx, do); err != nil {
			return "", fmt.Errorf("atomic: apply in order: the mutated fold: %w", err)
		}
		p.mutated.made[name] = true
	}
	return strings.ReplaceAll(p.sql.inOrder, p.table.Tables.Table(inOrderFunction), name), nil
}

// mutatedFolds are the mutated folds a store has created (inOrderStatement).
type mutatedFolds struct {
	sync.Mutex
	made map[string]bool
}

// mutantFold is the fold's migration with the conditions whose mutants are
// on replaced, or "" when none is: always "" in default builds. Each site
// is shared with the Store's method of the same name.
func mutantFold() string {
	const present = "v IS NOT NULL" // the condition, gone: any value takes
	var swaps []string
	if failpoint.Mutant("atomic.decrement.floor") {
		swaps = append(swaps, "v >= ys[i]", present)
	}
	if failpoint.Mutant("atomic.increment.cap") {
		swaps = append(swaps, "v <= ys[i]", present)
	}
	if failpoint.Mutant("atomic.cas.compare") {
		swaps = append(swaps, "v = xs[i]", present)
	}
	if failpoint.Mutant("atomic.setifgreater.compare") {
		swaps = append(swaps, "xs[i] > v", present)
	}
	if failpoint.Mutant("atomic.decrementmany.all") {
		// A member with enough takes, whether or not the batch applies.
		swaps = append(swaps, "IF all_ok THEN", "IF vals[mkis[j]] >= mys[j] THEN")
	}
	if len(swaps) == 0 {
		return ""
	}
	up, err := migrationFiles.ReadFile("migrations/002_apply_in_order.up.sql")
	if err != nil {
		panic(err)
	}
	return strings.NewReplacer(swaps...).Replace(string(up))
}

// inOrderError wraps the error of an ApplyInOrder statement: one the
// server returned, or one before anything was sent, means the statement
// did not apply; any other leaves it unknown (ErrUncertain).
func (p *Postgres) inOrderError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42883" { // undefined_function
		return fmt.Errorf("atomic: apply in order: the function %s is missing: apply atomic.Migrations (migrate.Up) under the Table's Tables: %w",
			p.table.Tables.Table(inOrderFunction), err)
	}
	known := errors.As(err, &pgErr) || pgconn.SafeToRetry(err)
	if known || failpoint.Mutant("atomic.inorder.uncertain") {
		return fmt.Errorf("atomic: apply in order: %w", err)
	}
	return fmt.Errorf("%w: apply in order: %w", ErrUncertain, err)
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
