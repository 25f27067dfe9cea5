package occ

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema that operation IDs need (WithID): one
// table, occ_operations, with the outcome of each write that carried an
// ID. Apply it with migrate.Up (or print it with migrate.Print) under the
// stores' TableConfig.Tables. A store whose writes carry no ID needs none
// of it.
func Migrations() []migrate.Migration {
	return migrate.FromDir("occ", migrationFiles, "migrations")
}

// The statements of writes with an ID, as atomic's: each records the ID in
// the write's own statement, in this order — age (where the ID's time
// stands on the database's clock), prior (the ID's record, if one committed
// before the statement began), fresh (one row when the ID is live and
// unrecorded), the row's version read under the lock its write takes (cur),
// the record (ins) when that version is the one expected, ON CONFLICT (id)
// DO NOTHING — the primary key keeps two executions of an ID from both
// applying — and the write itself, only when ins recorded it and the ID is
// still live once its record is in. A conflict or a missing row is not
// recorded. Besides the store's placeholders: {{ops}} the operations table,
// and {{id}}, {{minted}} (its time), {{retention}}, {{fp}} (the
// fingerprint), {{keytext}} (the key as text) the parameters after the
// write's own; {{scope}} the store's scope (scopeSQL), recorded with the ID:
// prior says whether a record is the store's own (mine).
const (
	sqlIDAge = `age AS MATERIALIZED (
		SELECT CASE WHEN {{minted}}::timestamptz < clock_timestamp() - {{retention}}::interval THEN 'expired'
			WHEN {{minted}}::timestamptz > clock_timestamp() + {{retention}}::interval THEN 'future' ELSE 'live' END AS verdict
	), prior AS MATERIALIZED (
		SELECT fingerprint, op, key, outcome, version, scope = {{scope}} AS mine FROM {{ops}} WHERE id = {{id}}::uuid
	), fresh AS MATERIALIZED (
		SELECT 1 FROM age WHERE verdict = 'live' AND NOT EXISTS (SELECT 1 FROM prior)
	)`
	sqlIDLive = `{{minted}}::timestamptz >= clock_timestamp() - {{retention}}::interval AS live`
	sqlIDOut  = `SELECT a.verdict, i.version, i.live, (SELECT count(*) FROM w), p.fingerprint, p.op, p.key, p.outcome, p.version, p.mine
	FROM age a LEFT JOIN prior p ON true LEFT JOIN ins i ON true`

	sqlUpdateID = `WITH ` + sqlIDAge + `, cur AS MATERIALIZED (
		SELECT {{version}} AS v FROM {{table}} WHERE {{key}} = {{key_arg}} AND EXISTS (SELECT 1 FROM fresh) FOR NO KEY UPDATE
	), ins AS (
		INSERT INTO {{ops}} (id, scope, fingerprint, op, key, outcome, version)
		SELECT {{id}}, {{scope}}, {{fp}}::bytea, 'update', {{keytext}}::text, 'applied', c.v + 1 FROM cur c WHERE c.v = {{version_arg}}
		ON CONFLICT (id) DO NOTHING
		RETURNING version, ` + sqlIDLive + `
	), w AS (
		UPDATE {{table}} SET {{set}}
		WHERE {{key}} = {{key_arg}} AND EXISTS (SELECT 1 FROM ins WHERE ins.live) RETURNING 1
	)
	` + sqlIDOut

	sqlDeleteID = `WITH ` + sqlIDAge + `, cur AS MATERIALIZED (
		SELECT {{version}} AS v FROM {{table}} WHERE {{key}} = $1 AND EXISTS (SELECT 1 FROM fresh) FOR UPDATE
	), ins AS (
		INSERT INTO {{ops}} (id, scope, fingerprint, op, key, outcome, version)
		SELECT {{id}}, {{scope}}, {{fp}}::bytea, 'delete', {{keytext}}::text, 'applied', c.v FROM cur c WHERE c.v = $2
		ON CONFLICT (id) DO NOTHING
		RETURNING version, ` + sqlIDLive + `
	), w AS (
		DELETE FROM {{table}} WHERE {{key}} = $1 AND EXISTS (SELECT 1 FROM ins WHERE ins.live) RETURNING 1
	)
	` + sqlIDOut

	// sqlInsertID inserts first (ON CONFLICT on the key DO NOTHING, as
	// without an ID), then records what it inserted with a plain INSERT:
	// should the ID have been recorded since, the statement fails on the
	// primary key and the row goes with it.
	sqlInsertID = `WITH ` + sqlIDAge + `, w AS (
		INSERT INTO {{table}} ({{insert_columns}}, {{version}}) SELECT {{insert_args}}, 1 FROM fresh
		ON CONFLICT ({{key}}) DO NOTHING RETURNING {{version}}
	), ins AS (
		INSERT INTO {{ops}} (id, scope, fingerprint, op, key, outcome, version)
		SELECT {{id}}, {{scope}}, {{fp}}::bytea, 'insert', {{keytext}}::text, 'applied', 1 FROM w
		RETURNING version, true AS live
	)
	` + sqlIDOut

	// sqlIDMiss explains a write with an ID that wrote nothing: the row's
	// version now (none: a missing row), and the ID's record, which a
	// retry of the ID may have written after the write's snapshot.
	sqlIDMiss = `SELECT (SELECT {{version}} FROM {{table}} WHERE {{key}} = $1), p.fingerprint, p.op, p.key, p.outcome, p.version, p.scope = {{scope}}
	FROM (SELECT 1) one LEFT JOIN {{ops}} p ON p.id = $2::uuid`

	// sqlIDLookup is the ID's half of Update's load: its age and record,
	// sent in one batch with the load.
	sqlIDLookup = `SELECT CASE WHEN $2::timestamptz < clock_timestamp() - $3::interval THEN 'expired'
		WHEN $2::timestamptz > clock_timestamp() + $3::interval THEN 'future' ELSE 'live' END,
		p.fingerprint, p.op, p.key, p.outcome, p.version, p.scope = {{scope}}
	FROM (SELECT 1) one LEFT JOIN {{ops}} p ON p.id = $1::uuid`

	sqlResolve = `WITH age AS MATERIALIZED (
		SELECT CASE WHEN $2::timestamptz < clock_timestamp() - $3::interval THEN 'expired'
			WHEN $2::timestamptz > clock_timestamp() + $3::interval THEN 'future' ELSE 'live' END AS verdict
	), prior AS MATERIALIZED (
		SELECT fingerprint, op, key, outcome, version, scope = {{scope}} AS mine FROM {{ops}} WHERE id = $1::uuid
	), ins AS (
		INSERT INTO {{ops}} (id, scope, fingerprint, op, key, outcome)
		SELECT $1, {{scope}}, '', '', '', 'abandoned' FROM age WHERE verdict = 'live' AND NOT EXISTS (SELECT 1 FROM prior)
		ON CONFLICT (id) DO NOTHING
		RETURNING $2::timestamptz >= clock_timestamp() - $3::interval AS live
	)
	SELECT a.verdict, i.live, p.fingerprint, p.op, p.key, p.outcome, p.version, p.mine
	FROM age a LEFT JOIN prior p ON true LEFT JOIN ins i ON true`

	// sqlPurge: see atomic's. A UUIDv7 begins with its time in
	// milliseconds, and uuid compares bytewise.
	sqlPurge = `DELETE FROM {{ops}} WHERE id IN (
		SELECT id FROM {{ops}} WHERE id < ` + sqlCutoff + `
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)`
	sqlCutoff = `(lpad(to_hex((extract(epoch FROM clock_timestamp() - $2::interval) * 1000)::bigint), 12, '0') || '00000000000000000000')::uuid`
)

// Unsafe variants for the mutant sites of operation IDs: fragments
// replaced in the statements that hold them.
const (
	// occ.id.replay: a recorded ID writes again and its record is written
	// over.
	safeFresh, mutantFresh       = `verdict = 'live' AND NOT EXISTS (SELECT 1 FROM prior)`, `verdict = 'live'`
	safeConflict, mutantConflict = `ON CONFLICT (id) DO NOTHING`, `ON CONFLICT (id) DO UPDATE SET version = excluded.version`
	// occ.id.expired: an ID older than Retention is live.
	safeAge, mutantAge   = `WHEN {{minted}}::timestamptz < clock_timestamp() - {{retention}}::interval THEN 'expired'`, ``
	safeLive, mutantLive = sqlIDLive, `true AS live`
	// The same in Resolve and the load.
	safeAge2, mutantAge2   = `WHEN $2::timestamptz < clock_timestamp() - $3::interval THEN 'expired'`, ``
	safeLive2, mutantLive2 = `$2::timestamptz >= clock_timestamp() - $3::interval AS live`, `true AS live`
	// occ.purge.expired: Purge deletes records whatever their age.
	safePurge, mutantPurge = `id < ` + sqlCutoff, `$2::interval IS NOT NULL`
	// occ.update.version and occ.delete.version on the statements with
	// an ID.
	safeUpdateVersion, mutantUpdateVersion = `WHERE c.v = {{version_arg}}`, `WHERE {{version_arg}}::bigint IS NOT NULL`
	safeDeleteVersion, mutantDeleteVersion = `WHERE c.v = $2`, `WHERE $2::bigint IS NOT NULL`
)

// idStatements are the statements of writes with an ID, rendered once per
// store.
type idStatements struct {
	insert, update, del, miss, lookup, resolve, purge string
}

// renderIDs renders the statements of writes with an ID; mutate edits each
// template first (the mutant sites), identity for the safe ones.
func (p *Postgres[K, T]) renderIDs(mutate func(string) string) idStatements {
	ops := p.m.cfg.Tables.Table("occ_operations")
	n := 0 // the parameters of the write itself
	for i := range p.m.cols {
		if i != p.m.version {
			n++
		}
	}
	r := func(tmpl string, first int) string {
		tmpl = mutate(tmpl)
		ids := strings.NewReplacer("{{ops}}", ops, "{{scope}}", p.scopeSQL(),
			"{{id}}", fmt.Sprintf("$%d", first), "{{minted}}", fmt.Sprintf("$%d", first+1),
			"{{retention}}", fmt.Sprintf("$%d", first+2), "{{fp}}", fmt.Sprintf("$%d", first+3),
			"{{keytext}}", fmt.Sprintf("$%d", first+4))
		return p.render.Replace(ids.Replace(tmpl))
	}
	return idStatements{
		insert:  r(sqlInsertID, n+1), // the columns but the version
		update:  r(sqlUpdateID, n+2), // the SET columns, the key, the version
		del:     r(sqlDeleteID, 3),   // the key, the version
		miss:    r(sqlIDMiss, 0),     // the key, the ID
		lookup:  r(sqlIDLookup, 0),   // the ID, its time, Retention
		resolve: r(sqlResolve, 0),    // the ID, its time, Retention
		purge:   r(sqlPurge, 0),      // the limit, Retention
	}
}

// scopeSQL is the SQL expression of the store's scope, recorded with each
// of its IDs: its table's schema (Schema, or the connection's current
// schema, where search_path finds the table), name and key column. Stores
// that share an operations table — tenants in schemas of their own — read
// and replay only their own records.
func (p *Postgres[K, T]) scopeSQL() string {
	if p.m.cfg.Schema != "" {
		return sqlText(p.where)
	}
	return "(current_schema() || '.' || " + sqlText(p.where) + ")"
}

// sqlText is s as an SQL string constant, whatever standard_conforming_strings
// says: an escape string, its backslashes and quotes doubled.
func sqlText(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, "'", "''").Replace(s) + "'"
}

// mutated returns the statements of writes with an ID with the mutant
// sites that are on: dead code in default builds.
func (p *Postgres[K, T]) mutated() idStatements {
	var edits [][2]string
	if failpoint.Mutant("occ.id.replay") {
		edits = append(edits, [2]string{safeFresh, mutantFresh}, [2]string{safeConflict, mutantConflict})
	}
	if failpoint.Mutant("occ.id.expired") {
		edits = append(edits, [2]string{safeAge, mutantAge}, [2]string{safeLive, mutantLive},
			[2]string{safeAge2, mutantAge2}, [2]string{safeLive2, mutantLive2})
	}
	if failpoint.Mutant("occ.purge.expired") {
		edits = append(edits, [2]string{safePurge, mutantPurge})
	}
	if failpoint.Mutant("occ.update.version") {
		edits = append(edits, [2]string{safeUpdateVersion, mutantUpdateVersion})
	}
	if failpoint.Mutant("occ.delete.version") {
		edits = append(edits, [2]string{safeDeleteVersion, mutantDeleteVersion})
	}
	if len(edits) == 0 {
		return p.ids
	}
	return p.renderIDs(func(s string) string {
		for _, e := range edits {
			s = strings.ReplaceAll(s, e[0], e[1])
		}
		return s
	})
}

// priorRow is a record read back: every field nil when there is none.
type priorRow struct {
	fingerprint []byte
	op, key     *string
	outcome     *string
	version     *int64
	mine        *bool // recorded by a store of the same scope
}

func (p *priorRow) dest() []any {
	return []any{&p.fingerprint, &p.op, &p.key, &p.outcome, &p.version, &p.mine}
}

// foreign reports a record of another store's scope, which the store
// must neither replay nor tell.
func (p priorRow) foreign() bool {
	return p.outcome != nil && p.mine != nil && !*p.mine && !failpoint.Mutant("occ.id.scope")
}

// foreignID is the refusal of id, recorded by another store, by op.
func foreignID(id uuid.UUID, op string) error {
	return &IDReusedError{ID: id, Op: op}
}

func (p priorRow) record() (record, bool) {
	if p.outcome == nil {
		return record{}, false
	}
	r := record{fingerprint: p.fingerprint, outcome: *p.outcome}
	if p.op != nil {
		r.op = *p.op
	}
	if p.key != nil {
		r.key = *p.key
	}
	if p.version != nil {
		r.version = *p.version
	}
	return r, true
}

// verdictError is the refusal of an ID by its age on the database's clock.
func verdictError(id uuid.UUID, verdict string) error {
	switch verdict {
	case "live":
		return nil
	case "future":
		return fmt.Errorf("%w: operation ID %s is dated more than the store's Retention ahead of the database's clock", ErrInvalid, id)
	}
	return fmt.Errorf("%w: %s", ErrExpired, id)
}

// writeID runs a write with an ID (sql, with args before the ID's) and
// returns the version it left, or why it wrote nothing.
func (p *Postgres[K, T]) writeID(ctx context.Context, c call, key K, expected int64, sql string, args ...any) (int64, error) {
	args = append(args, c.id, c.minted, p.m.cfg.Retention, c.fingerprint, c.key)
	for attempt := 1; ; attempt++ {
		var (
			verdict string
			version *int64
			live    *bool
			changed int64
			pr      priorRow
		)
		err := p.db.QueryRow(ctx, sql, args...).Scan(append([]any{&verdict, &version, &live, &changed}, pr.dest()...)...)
		switch {
		case err != nil && isUniqueViolation(err):
			// A retry of the ID recorded it after this statement began;
			// the statement rolled back, and the record answers.
		case err != nil:
			return 0, p.wrap(c.op, key, err)
		case verdictError(c.id, verdict) != nil:
			return 0, verdictError(c.id, verdict)
		case version != nil:
			if live != nil && !*live {
				return 0, fmt.Errorf("%w: %s", ErrExpired, c.id)
			}
			if changed != 1 {
				return 0, fmt.Errorf("occ: %s %s key %s with ID %s: recorded but changed %d rows", c.op, p.table, p.m.quote(key), c.id, changed)
			}
			return *version, nil
		case pr.foreign():
			return 0, foreignID(c.id, c.op)
		default:
			if r, ok := pr.record(); ok {
				return c.replay(r, failpoint.Mutant("occ.id.fingerprint"))
			}
		}
		v, done, err := p.missID(ctx, c, key, expected)
		if done || attempt == 3 {
			return v, err
		}
		// An insert's conflicting row vanished before the read: again.
	}
}

// missID explains a write with an ID that wrote nothing: the ID's record,
// which answers; a conflict; or a missing row. done is false for an insert
// whose conflicting row vanished since.
func (p *Postgres[K, T]) missID(ctx context.Context, c call, key K, expected int64) (_ int64, done bool, _ error) {
	var (
		cur *int64
		pr  priorRow
	)
	if err := p.db.QueryRow(ctx, p.ids.miss, key, c.id).Scan(append([]any{&cur}, pr.dest()...)...); err != nil {
		return 0, true, p.wrap(c.op, key, err)
	}
	if pr.foreign() {
		return 0, true, foreignID(c.id, c.op)
	}
	if r, ok := pr.record(); ok && !failpoint.Mutant("occ.id.replay") {
		v, err := c.replay(r, failpoint.Mutant("occ.id.fingerprint"))
		return v, true, err
	}
	switch {
	case cur != nil:
		return 0, true, &ConflictError{Key: p.m.text(key), Expected: expected, Actual: *cur}
	case c.op == OpInsert:
		return 0, false, &ConflictError{Key: p.m.text(key), Expected: 0, Actual: 0}
	}
	return 0, true, p.notFound(key)
}

// call returns the write's call for o's ID.
func (p *Postgres[K, T]) call(o options, op string, key K) (call, bool, error) {
	return newCall(o, p.where, op, p.m.text(key), p.m.unambiguous(key))
}

// loadID implements idLoader: the ID's age and record and the row, in one
// batch (one round trip).
func (p *Postgres[K, T]) loadID(ctx context.Context, key K, o options) (T, int64, error) {
	var zero T
	if err := p.m.checkKey(key); err != nil {
		return zero, 0, err
	}
	c, _, err := p.call(o, OpUpdate, key)
	if err != nil {
		return zero, 0, err
	}
	ids := p.mutated()
	b := &pgx.Batch{}
	var (
		verdict string
		pr      priorRow
		row     T
		loadErr error
	)
	b.Queue(ids.lookup, c.id, c.minted, p.m.cfg.Retention).QueryRow(func(r pgx.Row) error {
		return r.Scan(append([]any{&verdict}, pr.dest()...)...)
	})
	b.Queue(p.sql.load, key).QueryRow(func(r pgx.Row) error {
		loadErr = r.Scan(p.dest(&row)...)
		return nil
	})
	if err := p.db.SendBatch(ctx, b).Close(); err != nil {
		return zero, 0, p.wrap("load", key, err)
	}
	if err := verdictError(c.id, verdict); err != nil {
		return zero, 0, err
	}
	if pr.foreign() {
		return zero, 0, foreignID(c.id, c.op)
	}
	if r, ok := pr.record(); ok && !failpoint.Mutant("occ.id.replay") {
		v, err := c.replay(r, failpoint.Mutant("occ.id.fingerprint"))
		if err != nil {
			return zero, 0, err
		}
		return zero, 0, replayed{v}
	}
	switch {
	case errors.Is(loadErr, pgx.ErrNoRows):
		return zero, 0, p.notFound(key)
	case loadErr != nil:
		return zero, 0, p.wrap("load", key, loadErr)
	}
	return row, p.versionOf(&row), nil
}

// Resolve implements Recorder.
func (p *Postgres[K, T]) Resolve(ctx context.Context, id uuid.UUID) (Outcome, error) {
	minted, err := validID(id)
	if err != nil {
		return Outcome{}, err
	}
	ids := p.mutated()
	if failpoint.Mutant("occ.resolve.abandon") {
		// Read-only: an unrecorded ID is reported abandoned, and left free.
		var verdict string
		var pr priorRow
		if err := p.db.QueryRow(ctx, ids.lookup, id, minted, p.m.cfg.Retention).Scan(append([]any{&verdict}, pr.dest()...)...); err != nil {
			return Outcome{}, err
		}
		if pr.foreign() {
			return Outcome{}, foreignID(id, "resolve")
		}
		if r, ok := pr.record(); ok {
			return r.result(id), nil
		}
		return record{outcome: recAbandoned}.result(id), verdictError(id, verdict)
	}
	for attempt := 1; ; attempt++ {
		var (
			verdict string
			live    *bool
			pr      priorRow
		)
		err := p.db.QueryRow(ctx, ids.resolve, id, minted, p.m.cfg.Retention).Scan(append([]any{&verdict, &live}, pr.dest()...)...)
		switch {
		case err != nil:
			return Outcome{}, fmt.Errorf("occ: resolve %s: %w", id, err)
		case verdictError(id, verdict) != nil:
			return Outcome{}, verdictError(id, verdict)
		case live != nil && !*live:
			return Outcome{}, fmt.Errorf("%w: %s", ErrExpired, id)
		case live != nil:
			return record{outcome: recAbandoned}.result(id), nil
		case pr.foreign():
			return Outcome{}, foreignID(id, "resolve")
		}
		if r, ok := pr.record(); ok {
			return r.result(id), nil
		}
		if attempt == 32 {
			return Outcome{}, fmt.Errorf("occ: resolve %s: undecided after %d attempts", id, attempt)
		}
		// Recorded after the statement's snapshot: the next one sees it.
	}
}

// Purge implements Recorder: it deletes up to limit records of IDs older
// than Retention, by the database's clock.
func (p *Postgres[K, T]) Purge(ctx context.Context, limit int) (int, error) {
	if err := validLimit(limit); err != nil {
		return 0, err
	}
	tag, err := p.db.Exec(ctx, p.mutated().purge, limit, p.m.cfg.Retention)
	if err != nil {
		return 0, fmt.Errorf("occ: purge: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// insertID is Insert with an ID.
func (p *Postgres[K, T]) insertID(ctx context.Context, c call, key K, args []any) (int64, error) {
	return p.writeID(ctx, c, key, 0, p.mutated().insert, args...)
}

// updateID is Update with an ID.
func (p *Postgres[K, T]) updateID(ctx context.Context, c call, key K, rv reflect.Value, version int64) (int64, error) {
	return p.writeID(ctx, c, key, version, p.mutated().update, append(p.setArgs(rv), key, version)...)
}

// deleteID is Delete with an ID.
func (p *Postgres[K, T]) deleteID(ctx context.Context, c call, key K, version int64) error {
	_, err := p.writeID(ctx, c, key, version, p.mutated().del, key, version)
	return err
}
