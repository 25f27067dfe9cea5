package atomic

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema that operation IDs (WithID) and
// ApplyInOrder (and so a Coalescer on Postgres) need: the table
// atomic_operations, with the outcome of each operation that carried an ID,
// and the function atomic_apply_in_order, the fold of ApplyInOrder's steps.
// Apply it with migrate.Up (or print it with migrate.Print) under the
// Tables of the stores' Table. A store that uses neither needs none of it.
func Migrations() []migrate.Migration {
	return migrate.FromDir("atomic", migrationFiles, "migrations")
}

// The statements of operations with an ID. Each records the ID with the
// operation's outcome in the operation's own statement, in this order:
//
//   - age: where the ID's time stands on the database's clock: older than
//     Retention ("expired") or dated beyond it ("future") refuses the ID;
//   - prior: the ID's record, if one committed before the statement began;
//   - fresh: one row when the ID is live and has no record;
//   - the operation's read, which locks the row (FOR NO KEY UPDATE, the
//     lock its UPDATE takes anyway), so that the decision is made on the
//     row's latest value, and the refusal reports it exactly;
//   - ins: the ID's record with the outcome decided on that value. ON
//     CONFLICT (id) DO NOTHING: a retry of the ID that ran beside it waits
//     for the first to commit and then records nothing — the primary key,
//     not the prior read, is what keeps two executions of an ID from both
//     applying;
//   - u: the effect, only when ins recorded that it applied, and only if the
//     ID is still live once its record is in (live is evaluated after the
//     insert: a purge that deleted an expired record of the ID just before
//     cannot let it apply again).
//
// The record and the effect are one statement: they commit together or not
// at all. {O} is the operations table, {S} the store's scope (scopeSQL),
// recorded with the ID: prior says whether the record is the store's own
// (mine); the user's table is {T} as elsewhere.
const (
	sqlIDAge = `age AS MATERIALIZED (
		SELECT CASE WHEN $5::timestamptz < clock_timestamp() - $6::interval THEN 'expired'
			WHEN $5::timestamptz > clock_timestamp() + $6::interval THEN 'future' ELSE 'live' END AS verdict
	), prior AS MATERIALIZED (
		SELECT fingerprint, op, key, outcome, value, amount, bound, keys, vals, scope = {S} AS mine FROM {O} WHERE id = $4::uuid
	), fresh AS MATERIALIZED (
		SELECT 1 FROM age WHERE verdict = 'live' AND NOT EXISTS (SELECT 1 FROM prior)
	)`

	// sqlUpdateID is Decrement, Increment, CompareAndSet and SetIfGreater:
	// {OP} the operation, {OK} its condition on the locked value c.v, {NEW}
	// the value it sets, {REFUSED} the outcome when the condition fails.
	// $1 key, $2 amount (or old, or value), $3 threshold (or ceiling, or
	// next), $4 ID, $5 its time, $6 Retention, $7 fingerprint, $8 floor (or
	// cap).
	sqlUpdateID = `WITH ` + sqlIDAge + `, cur AS MATERIALIZED (
		SELECT {V} AS v FROM {T} WHERE {K} = $1::text AND EXISTS (SELECT 1 FROM fresh) FOR NO KEY UPDATE
	), ins AS (
		INSERT INTO {O} (id, scope, fingerprint, op, key, outcome, value, amount, bound)
		SELECT $4, {S}, $7::bytea, '{OP}', $1,
			CASE WHEN c.v IS NULL THEN 'not_found' WHEN {OK} THEN 'applied' ELSE '{REFUSED}' END,
			CASE WHEN {OK} THEN {NEW} ELSE c.v END, $2::bigint, $8::bigint
		FROM fresh LEFT JOIN cur c ON true
		ON CONFLICT (id) DO NOTHING
		RETURNING outcome, value, $5::timestamptz >= clock_timestamp() - $6::interval AS live
	), u AS (
		UPDATE {T} SET {V} = (SELECT ins.value FROM ins)
		WHERE {K} = $1::text AND EXISTS (SELECT 1 FROM ins WHERE ins.outcome = 'applied' AND ins.live)
		RETURNING 1
	)
	SELECT a.verdict, i.outcome, i.value, i.live, (SELECT count(*) FROM u),
		p.fingerprint, p.op, p.key, p.outcome, p.value, p.amount, p.bound, p.keys, p.vals, p.mine
	FROM age a LEFT JOIN prior p ON true LEFT JOIN ins i ON true`

	// sqlClaimID is Claim: the insert first (ON CONFLICT on the key DO
	// NOTHING, as without an ID), then its record. A claim that applied is
	// recorded by a plain INSERT: should the ID have been recorded since,
	// the statement fails on the primary key and the claim rolls back with
	// it. A refusal is recorded with the value of the row that refused it
	// when the statement's snapshot holds that row; when the row committed
	// after the snapshot, nothing is recorded, and the claim runs again. The
	// parameters are sqlUpdateID's: $2 and $3 both the value claimed, $8 0.
	sqlClaimID = `WITH ` + sqlIDAge + `, t_ins AS (
		INSERT INTO {T} ({K}, {V}) SELECT $1::text, $2::bigint FROM fresh
		ON CONFLICT ({K}) DO NOTHING RETURNING 1
	), seen AS MATERIALIZED (
		SELECT {V} AS v FROM {T} WHERE {K} = $1::text AND EXISTS (SELECT 1 FROM fresh)
	), applied AS (
		INSERT INTO {O} (id, scope, fingerprint, op, key, outcome, value, amount, bound)
		SELECT $4, {S}, $7::bytea, 'claim', $1, 'applied', $2, $3::bigint, $8::bigint FROM t_ins
		RETURNING outcome, value
	), refused AS (
		INSERT INTO {O} (id, scope, fingerprint, op, key, outcome, value, amount, bound)
		SELECT $4, {S}, $7::bytea, 'claim', $1, 'conflict', s.v, $3::bigint, $8::bigint
		FROM seen s WHERE NOT EXISTS (SELECT 1 FROM t_ins)
		ON CONFLICT (id) DO NOTHING
		RETURNING outcome, value
	), i AS (
		SELECT * FROM applied UNION ALL SELECT * FROM refused
	)
	SELECT a.verdict, i.outcome, i.value, i.outcome IS NOT NULL, (SELECT count(*) FROM t_ins),
		p.fingerprint, p.op, p.key, p.outcome, p.value, p.amount, p.bound, p.keys, p.vals, p.mine
	FROM age a LEFT JOIN prior p ON true LEFT JOIN i ON true`

	// sqlDecrementManyID is sqlDecrementMany with a record: the batch's
	// rows locked in key order, the first key in key order that is missing
	// or short (miss) decides the outcome, and the update decides on the
	// locked values. $1 keys, $2 amounts, $3 thresholds (each in key order),
	// $4–$7 as sqlUpdateID, $8 floor.
	sqlDecrementManyID = `WITH ` + sqlIDAge + `, req AS MATERIALIZED (
		SELECT k, a, th, ord FROM unnest($1::text[], $2::bigint[], $3::bigint[]) WITH ORDINALITY AS r(k, a, th, ord)
	), locked AS MATERIALIZED (
		SELECT {K} AS k, {V} AS v FROM {T}
		WHERE {K} = ANY($1::text[]) AND EXISTS (SELECT 1 FROM fresh) ORDER BY {K} FOR NO KEY UPDATE
	), miss AS MATERIALIZED (
		SELECT r.k, r.a, l.v FROM req r LEFT JOIN locked l ON l.k = r.k
		WHERE l.k IS NULL OR l.v < r.th ORDER BY r.ord LIMIT 1
	), ins AS (
		INSERT INTO {O} (id, scope, fingerprint, op, key, outcome, value, amount, bound, keys, vals)
		SELECT $4, {S}, $7::bytea, 'decrement many', coalesce(m.k, ''),
			CASE WHEN m.k IS NULL THEN 'applied' WHEN m.v IS NULL THEN 'not_found' ELSE 'insufficient' END,
			m.v, m.a, $8::bigint,
			CASE WHEN m.k IS NULL THEN $1::text[] END,
			CASE WHEN m.k IS NULL THEN (SELECT array_agg(l.v - r.a ORDER BY r.ord) FROM req r JOIN locked l ON l.k = r.k) END
		FROM fresh LEFT JOIN miss m ON true
		ON CONFLICT (id) DO NOTHING
		RETURNING outcome, key, value, amount, keys, vals, $5::timestamptz >= clock_timestamp() - $6::interval AS live
	), u AS (
		UPDATE {T} t SET {V} = l.v - r.a FROM req r JOIN locked l ON l.k = r.k
		WHERE t.{K} = r.k AND l.v >= r.th AND EXISTS (SELECT 1 FROM ins WHERE ins.outcome = 'applied' AND ins.live)
		RETURNING 1
	)
	SELECT a.verdict, i.outcome, i.key, i.value, i.amount, i.keys, i.vals, i.live, (SELECT count(*) FROM u),
		p.fingerprint, p.op, p.key, p.outcome, p.value, p.amount, p.bound, p.keys, p.vals, p.mine
	FROM age a LEFT JOIN prior p ON true LEFT JOIN ins i ON true`

	// sqlResolve returns the ID's record, or records it as abandoned: an
	// operation of the ID still on its way then finds the record and does
	// not apply. $1 ID, $2 its time, $3 Retention.
	sqlResolve = `WITH age AS MATERIALIZED (
		SELECT CASE WHEN $2::timestamptz < clock_timestamp() - $3::interval THEN 'expired'
			WHEN $2::timestamptz > clock_timestamp() + $3::interval THEN 'future' ELSE 'live' END AS verdict
	), prior AS MATERIALIZED (
		SELECT fingerprint, op, key, outcome, value, amount, bound, keys, vals, scope = {S} AS mine FROM {O} WHERE id = $1::uuid
	), ins AS (
		INSERT INTO {O} (id, scope, fingerprint, op, key, outcome)
		SELECT $1, {S}, '', '', '', 'abandoned' FROM age WHERE verdict = 'live' AND NOT EXISTS (SELECT 1 FROM prior)
		ON CONFLICT (id) DO NOTHING
		RETURNING $2::timestamptz >= clock_timestamp() - $3::interval AS live
	)
	SELECT a.verdict, i.live,
		p.fingerprint, p.op, p.key, p.outcome, p.value, p.amount, p.bound, p.keys, p.vals, p.mine
	FROM age a LEFT JOIN prior p ON true LEFT JOIN ins i ON true`

	// sqlPurge deletes a batch of records of IDs older than Retention, by
	// the database's clock, skipping those a running statement holds. A
	// UUIDv7 begins with its time in milliseconds, and uuid compares
	// bytewise: the IDs older than the cutoff are those below the UUID
	// made of the cutoff's milliseconds and zeros.
	sqlPurge = `DELETE FROM {O} WHERE id IN (
		SELECT id FROM {O} WHERE id < ` + sqlCutoff + `
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)`
	sqlCutoff = `(lpad(to_hex((extract(epoch FROM clock_timestamp() - $2::interval) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid`
)

// Unsafe variants for the mutant sites of operation IDs: each a fragment
// replaced in the statement it belongs to.
const (
	// atomic.id.replay: a recorded ID runs again and writes its record
	// over.
	safeFresh, mutantFresh       = `verdict = 'live' AND NOT EXISTS (SELECT 1 FROM prior)`, `verdict = 'live'`
	safeConflict, mutantConflict = `ON CONFLICT (id) DO NOTHING`, `ON CONFLICT (id) DO UPDATE SET outcome = excluded.outcome, value = excluded.value, keys = excluded.keys, vals = excluded.vals`
	// atomic.id.expired: an ID older than Retention is live.
	safeAge, mutantAge   = `WHEN $5::timestamptz < clock_timestamp() - $6::interval THEN 'expired'`, ``
	safeLive, mutantLive = `$5::timestamptz >= clock_timestamp() - $6::interval AS live`, `true AS live`
	// atomic.id.expired in Resolve.
	safeResolveAge, mutantResolveAge   = `WHEN $2::timestamptz < clock_timestamp() - $3::interval THEN 'expired'`, ``
	safeResolveLive, mutantResolveLive = `$2::timestamptz >= clock_timestamp() - $3::interval AS live`, `true AS live`
	// atomic.decrementmany.all: each key with enough is taken, even when
	// another is short.
	safeManyAll = `ins.outcome = 'applied' AND `
	// atomic.purge.expired: Purge deletes records whatever their age.
	safePurge, mutantPurge = `id < ` + sqlCutoff, `$2::interval IS NOT NULL`
)

// idStatements are the statements of operations with an ID, rendered once
// per store.
type idStatements struct {
	decrement, increment, cas, setIfGreater, claim, many, resolve, read, purge string
}

func (t Table) renderIDs() idStatements {
	update := func(op, ok, next, refused string) string {
		return t.renderOps(strings.NewReplacer("{OP}", op, "{OK}", ok, "{NEW}", next, "{REFUSED}", refused).Replace(sqlUpdateID))
	}
	return idStatements{
		decrement:    update(OpDecrement, `c.v >= $3::bigint`, `c.v - $2::bigint`, recInsufficient),
		increment:    update(OpIncrement, `c.v <= $3::bigint`, `c.v + $2::bigint`, recInsufficient),
		cas:          update(OpCompareAndSet, `c.v = $2::bigint`, `$3::bigint`, recConflict),
		setIfGreater: update(OpSetIfGreater, `c.v < $2::bigint`, `$3::bigint`, recConflict), // $2 = $3 = the value
		claim:        t.renderOps(sqlClaimID),
		many:         t.renderOps(sqlDecrementManyID),
		resolve:      t.renderOps(sqlResolve),
		read:         t.renderOps(sqlReadRecord),
		purge:        t.renderOps(sqlPurge),
	}
}

// renderOps renders a statement on the user's table and the operations
// table, {S} the store's scope (scopeSQL).
func (t Table) renderOps(tmpl string) string {
	return strings.NewReplacer("{O}", t.Tables.Table("atomic_operations"), "{S}", t.scopeSQL()).Replace(t.render(tmpl))
}

// scopeSQL is the SQL expression of the store's scope, recorded with each
// of its IDs: its table's schema (Schema, or the connection's current
// schema, where search_path finds the table), name and columns. Stores
// that share an operations table — tenants in schemas of their own — read
// and replay only their own records.
func (t Table) scopeSQL() string {
	if t.Schema != "" {
		return sqlText(t.where())
	}
	return "(current_schema() || '.' || " + sqlText(t.where()) + ")"
}

// sqlText is s as an SQL string constant, whatever standard_conforming_strings
// says: an escape string, its backslashes and quotes doubled.
func sqlText(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}

// mutated applies the mutant sites of operation IDs to sql: dead code in
// default builds.
func mutated(sql string) string {
	if failpoint.Mutant("atomic.id.replay") {
		sql = strings.ReplaceAll(strings.ReplaceAll(sql, safeFresh, mutantFresh), safeConflict, mutantConflict)
	}
	if failpoint.Mutant("atomic.id.expired") {
		sql = strings.ReplaceAll(strings.ReplaceAll(sql, safeAge, mutantAge), safeLive, mutantLive)
	}
	return sql
}

// idRow is what a statement of an operation with an ID answers: the ID's
// age, the record it wrote (outcome nil: none), how many rows the effect
// changed, and the record that was there before.
type idRow struct {
	verdict string
	outcome *string
	value   *int64
	live    *bool
	changed int64
	// a DecrementMany's record
	key    *string
	amount *int64
	keys   []string
	vals   []int64

	prior priorRow
}

// priorRow is a record read back: every field nil when there is none.
type priorRow struct {
	fingerprint   []byte
	op, key       *string
	outcome       *string
	value         *int64
	amount, bound *int64
	keys          []string
	vals          []int64
	mine          *bool // recorded by a store of the same scope
}

func (p *priorRow) dest() []any {
	return []any{&p.fingerprint, &p.op, &p.key, &p.outcome, &p.value, &p.amount, &p.bound, &p.keys, &p.vals, &p.mine}
}

// foreign reports a record of another store's scope, which the store
// must neither replay nor tell.
func (p priorRow) foreign() bool {
	return p.outcome != nil && p.mine != nil && !*p.mine && !failpoint.Mutant("atomic.id.scope")
}

// foreignID is the refusal of id, recorded by another store, by op.
func foreignID(id uuid.UUID, op string) error {
	return &IDReusedError{ID: id, Op: op}
}

// record returns the prior record; ok is false when there is none.
func (p priorRow) record() (record, bool) {
	if p.outcome == nil {
		return record{}, false
	}
	r := record{fingerprint: p.fingerprint, outcome: *p.outcome, keys: p.keys, vals: p.vals}
	for _, f := range []struct {
		dst *string
		src *string
	}{{&r.op, p.op}, {&r.key, p.key}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	for _, f := range []struct {
		dst *int64
		src *int64
	}{{&r.value, p.value}, {&r.amount, p.amount}, {&r.bound, p.bound}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return r, true
}

// decided is what a statement of an operation with an ID decided: the
// outcome (with replayed set when it came from a record), or err; again
// when nothing could be decided in this statement (a retry of the ID
// recorded it after the statement's snapshot was taken, or a claim was
// refused by a row the snapshot does not hold) and the statement must run
// again.
type decided struct {
	out      Outcome
	replayed bool
	again    bool
}

// decide reads an idRow for c: fresh holds the record the statement wrote.
func (c call) decide(row idRow, fresh func() record) (decided, error) {
	switch row.verdict {
	case "live":
	case "future":
		return decided{}, ageErrorFuture(c.id)
	default:
		return decided{}, fmt.Errorf("%w: %s", ErrExpired, c.id)
	}
	if row.outcome != nil {
		if row.live != nil && !*row.live {
			// The ID expired while its statement ran: its record is in,
			// its effect is not, and no one will read the record.
			return decided{}, fmt.Errorf("%w: %s", ErrExpired, c.id)
		}
		r := fresh()
		want := int64(0)
		if r.outcome == recApplied {
			want = 1
			if c.op == OpDecrementMany {
				want = int64(len(r.keys))
			}
		}
		if row.changed != want {
			return decided{}, fmt.Errorf("atomic: %s %s with ID %s: recorded %s but changed %d rows", c.op, short.Quote(c.key), c.id, r.outcome, row.changed)
		}
		return decided{out: r.result(c.id)}, nil
	}
	if row.prior.foreign() {
		return decided{}, foreignID(c.id, c.op)
	}
	if r, ok := row.prior.record(); ok {
		out, err := c.replay(r, failpoint.Mutant("atomic.id.fingerprint"))
		return decided{out: out, replayed: true}, err
	}
	return decided{again: true}, nil
}

func ageErrorFuture(id uuid.UUID) error {
	return fmt.Errorf("%w: operation ID %s is dated more than the store's Retention ahead of the database's clock", ErrInvalid, id)
}

// runID runs an operation with an ID until it is decided.
func (p *Postgres) runID(ctx context.Context, c call, run func() (idRow, func() record, error)) (decided, error) {
	for attempt := 1; ; attempt++ {
		row, fresh, err := run()
		if err != nil {
			if err := p.idFailed(ctx, c, err); !errors.Is(err, errRecordedMeanwhile) {
				return decided{}, err
			}
		} else if d, err := c.decide(row, fresh); err != nil || !d.again {
			return d, err
		}
		if attempt == maxAttempts {
			return decided{}, fmt.Errorf("atomic: %s %s with ID %s: undecided after %d attempts", c.op, short.Quote(c.key), c.id, attempt)
		}
	}
}

// idFailed explains a failed statement of an operation with an ID. A
// unique violation on the operations table is a retry of the ID that
// recorded it after the statement began: the statement rolled back, and
// the record answers — unless the statement ran in the caller's
// transaction, which the failure aborted.
func (p *Postgres) idFailed(ctx context.Context, c call, err error) error {
	wrapped := fmt.Errorf("atomic: %s %s with ID %s: %w", c.op, short.Quote(c.key), c.id, err)
	if !isUniqueViolation(err) {
		return wrapped
	}
	var pr priorRow
	if rerr := p.db.QueryRow(ctx, p.ids.read, c.id).Scan(pr.dest()...); rerr != nil {
		return wrapped
	}
	if _, ok := pr.record(); !ok {
		return wrapped
	}
	return errRecordedMeanwhile
}

// errRecordedMeanwhile makes the caller of idFailed read the record.
var errRecordedMeanwhile = errors.New("atomic: the ID was recorded meanwhile")

// do runs sql, one of the single-key statements, for c.
func (p *Postgres) do(ctx context.Context, c call, sql string, a, b int64) (decided, error) {
	sql = mutated(sql)
	return p.runID(ctx, c, func() (idRow, func() record, error) {
		var row idRow
		dest := append([]any{&row.verdict, &row.outcome, &row.value, &row.live, &row.changed}, row.prior.dest()...)
		err := p.db.QueryRow(ctx, sql, c.key, a, b, c.id, c.minted, p.retention, c.fingerprint, c.bound).Scan(dest...)
		return row, func() record {
			r := record{fingerprint: c.fingerprint, op: c.op, key: c.key, outcome: *row.outcome, amount: c.amount, bound: c.bound}
			if row.value != nil {
				r.value = *row.value
			}
			return r
		}, err
	})
}

// doMany runs DecrementMany's statement for c and the batch b.
func (p *Postgres) doMany(ctx context.Context, c call, b batch) (decided, error) {
	sql := mutated(p.ids.many)
	if failpoint.Mutant("atomic.decrementmany.all") {
		sql = strings.Replace(sql, safeManyAll, "", 1)
	}
	return p.runID(ctx, c, func() (idRow, func() record, error) {
		var row idRow
		dest := append([]any{&row.verdict, &row.outcome, &row.key, &row.value, &row.amount, &row.keys, &row.vals, &row.live, &row.changed},
			row.prior.dest()...)
		err := p.db.QueryRow(ctx, sql, b.keys, b.amounts, b.thresholds, c.id, c.minted, p.retention, c.fingerprint, c.bound).Scan(dest...)
		return row, func() record {
			r := record{fingerprint: c.fingerprint, op: c.op, outcome: *row.outcome, bound: c.bound, keys: row.keys, vals: row.vals}
			for _, f := range []struct {
				dst *int64
				src *int64
			}{{&r.value, row.value}, {&r.amount, row.amount}} {
				if f.src != nil {
					*f.dst = *f.src
				}
			}
			if row.key != nil {
				r.key = *row.key
			}
			return r
		}, err
	})
}

// read is the statement idFailed reads a record with.
const sqlReadRecord = `SELECT fingerprint, op, key, outcome, value, amount, bound, keys, vals, scope = {S} FROM {O} WHERE id = $1`

// Resolve implements Recorder.
func (p *Postgres) Resolve(ctx context.Context, id uuid.UUID) (Outcome, error) {
	minted, err := validID(id)
	if err != nil {
		return Outcome{}, err
	}
	if failpoint.Mutant("atomic.resolve.abandon") {
		// Read-only: an unrecorded ID is reported abandoned, and left free.
		var pr priorRow
		err := p.db.QueryRow(ctx, p.ids.read, id).Scan(pr.dest()...)
		if pr.foreign() {
			return Outcome{}, foreignID(id, "resolve")
		}
		if r, ok := pr.record(); ok {
			return r.result(id), nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return Outcome{}, err
		}
		return record{outcome: recAbandoned}.result(id), nil
	}
	sql := p.ids.resolve
	if failpoint.Mutant("atomic.id.expired") {
		sql = strings.Replace(strings.Replace(sql, safeResolveAge, mutantResolveAge, 1), safeResolveLive, mutantResolveLive, 1)
	}
	for attempt := 1; ; attempt++ {
		var (
			verdict string
			live    *bool
			pr      priorRow
		)
		err := p.db.QueryRow(ctx, sql, id, minted, p.retention).Scan(append([]any{&verdict, &live}, pr.dest()...)...)
		switch {
		case err != nil:
			return Outcome{}, fmt.Errorf("atomic: resolve %s: %w", id, err)
		case verdict == "future":
			return Outcome{}, ageErrorFuture(id)
		case verdict != "live" || (live != nil && !*live):
			return Outcome{}, fmt.Errorf("%w: %s", ErrExpired, id)
		case live != nil:
			return record{outcome: recAbandoned}.result(id), nil
		case pr.foreign():
			return Outcome{}, foreignID(id, "resolve")
		}
		if r, ok := pr.record(); ok {
			return r.result(id), nil
		}
		if attempt == maxAttempts {
			return Outcome{}, fmt.Errorf("atomic: resolve %s: undecided after %d attempts", id, attempt)
		}
		// Recorded after the statement's snapshot: the next one sees it.
	}
}

// Purge implements Recorder: it deletes up to limit records of IDs older
// than the table's Retention, by the database's clock.
func (p *Postgres) Purge(ctx context.Context, limit int) (int, error) {
	if err := validLimit(limit); err != nil {
		return 0, err
	}
	sql := p.ids.purge
	if failpoint.Mutant("atomic.purge.expired") {
		sql = strings.Replace(sql, safePurge, mutantPurge, 1)
	}
	tag, err := p.db.Exec(ctx, sql, limit, p.retention)
	if err != nil {
		return 0, fmt.Errorf("atomic: purge: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
