package occ

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// DB is what the PostgreSQL backend needs from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it, so every operation can
// run inside the caller's own transaction (Postgres.WithDB).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// The statements of a store, rendered once per store over the user's table:
// {{table}} is its (schema-qualified) name, {{key}} and {{version}} its key
// and version columns, {{columns}} every mapped column, {{set}} the SET list
// of the columns other than the key and the version ($1…$n) followed by the
// version's bump, {{key_arg}} and {{version_arg}} the placeholders after it.
const (
	sqlLoad   = `SELECT {{columns}} FROM {{table}} WHERE {{key}} = $1`
	sqlInsert = `INSERT INTO {{table}} ({{insert_columns}}, {{version}}) VALUES ({{insert_args}}, 1)
		ON CONFLICT ({{key}}) DO NOTHING RETURNING {{version}}`
	sqlUpdate = `UPDATE {{table}} SET {{set}}
		WHERE {{key}} = {{key_arg}} AND {{version}} = {{version_arg}} RETURNING {{version}}`
	sqlDelete = `DELETE FROM {{table}} WHERE {{key}} = $1 AND {{version}} = $2`
	// sqlVersion explains a write that matched no row: a conflict (the row
	// is at another version) or a missing row.
	sqlVersion = `SELECT {{version}} FROM {{table}} WHERE {{key}} = $1`
)

// The unsafe variants of the mutant sites (internal/failpoint): rendered only
// in a build with the lockfree_mutants tag, when the site is enabled.
const (
	sqlUpdateAnyVersion = `UPDATE {{table}} SET {{set}}
		WHERE {{key}} = {{key_arg}} AND {{version_arg}}::bigint IS NOT NULL RETURNING {{version}}`
	sqlDeleteAnyVersion = `DELETE FROM {{table}} WHERE {{key}} = $1 AND $2::bigint IS NOT NULL`
	sqlDeleteKey        = `DELETE FROM {{table}} WHERE {{key}} = $1`
)

// pgStatements are the rendered statements of one store, and the fragments
// the Fenced twin hands to fencedlock.Fence.
type pgStatements struct {
	load, insert, update, del, version string
	columns, set                       string
}

// Postgres is a Store on the user's own PostgreSQL table: every db-tagged
// field of T is a column, one of them the key and one the version. Each
// operation is one statement (plus a read of the current version when it
// misses, to tell a conflict from a missing row). It is safe for concurrent
// use; the zero value is not usable, call NewPostgres.
type Postgres[K comparable, T any] struct {
	db     DB
	m      *mapping[K]
	table  string // as the user named it, for messages
	where  string // the table and key column, in fingerprints
	render *strings.Replacer
	sql    pgStatements
	ids    idStatements
}

// NewPostgres returns a store of T rows with keys of type K in the user's
// table on db, mapped as cfg says (nil: the key column "id", the version
// column "version", the table found on the search_path). The table is the
// user's: nothing is created; it needs the key column (primary key or unique)
// and a bigint version column. A nil db, a bad table name or a bad mapping is
// an ErrInvalid. It does no I/O.
func NewPostgres[K comparable, T any](db DB, table string, cfg *TableConfig) (*Postgres[K, T], error) {
	if db == nil {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	if err := validIdent("table", table, true); err != nil {
		return nil, err
	}
	m, err := newMapping[K, T](cfg)
	if err != nil {
		return nil, err
	}
	p := &Postgres[K, T]{db: db, m: m, table: table, render: newRenderer(m, table)}
	r := p.render.Replace
	p.sql = pgStatements{
		load: r(sqlLoad), insert: r(sqlInsert), update: r(sqlUpdate), del: r(sqlDelete), version: r(sqlVersion),
		columns: r("{{columns}}"), set: r("{{set}}"),
	}
	p.where = r("{{table}}.{{key}}")
	p.ids = p.renderIDs(func(s string) string { return s })
	return p, nil
}

// newRenderer returns the replacer of the statements' placeholders for the
// table and mapping. Every identifier is quoted (pgx.Identifier), so no name
// can end one early.
func newRenderer[K comparable](m *mapping[K], table string) *strings.Replacer {
	c := m.cfg
	id := pgx.Identifier{table}
	if c.Schema != "" {
		id = pgx.Identifier{c.Schema, table}
	}
	q := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	var all, ins, args, set []string
	for i, col := range m.cols {
		all = append(all, q(col.name))
		if i == m.version {
			continue
		}
		ins = append(ins, q(col.name))
		args = append(args, fmt.Sprintf("$%d", len(args)+1))
		if i != m.key {
			set = append(set, fmt.Sprintf("%s = $%d", q(col.name), len(set)+1))
		}
	}
	n := len(set) // the SET list's arguments are $1…$n
	set = append(set, q(c.Version)+" = "+q(c.Version)+" + 1")
	return strings.NewReplacer(
		"{{table}}", id.Sanitize(), "{{key}}", q(c.Key), "{{version}}", q(c.Version),
		"{{columns}}", strings.Join(all, ", "), "{{insert_columns}}", strings.Join(ins, ", "),
		"{{insert_args}}", strings.Join(args, ", "), "{{set}}", strings.Join(set, ", "),
		"{{key_arg}}", fmt.Sprintf("$%d", n+1), "{{version_arg}}", fmt.Sprintf("$%d", n+2),
	)
}

// WithDB returns a store that runs its statements on db — typically the
// caller's transaction — with the same configuration. A nil db is the
// store's own.
func (p *Postgres[K, T]) WithDB(db DB) *Postgres[K, T] {
	c := *p
	if db != nil {
		c.db = db
	}
	return &c
}

func (p *Postgres[K, T]) layout() *mapping[K] { return p.m }

// setArgs returns the values of row's SET columns (all but key and version).
func (p *Postgres[K, T]) setArgs(row reflect.Value) []any {
	args := make([]any, 0, len(p.m.cols))
	for i, c := range p.m.cols {
		if i != p.m.key && i != p.m.version {
			args = append(args, row.FieldByIndex(c.index).Interface())
		}
	}
	return args
}

// dest returns pointers to row's mapped fields, in column order, for Scan.
func (p *Postgres[K, T]) dest(row *T) []any {
	rv := reflect.ValueOf(row).Elem()
	dest := make([]any, len(p.m.cols))
	for i, c := range p.m.cols {
		dest[i] = rv.FieldByIndex(c.index).Addr().Interface()
	}
	return dest
}

// versionOf returns the version field of row.
func (p *Postgres[K, T]) versionOf(row *T) int64 {
	return reflect.ValueOf(row).Elem().FieldByIndex(p.m.cols[p.m.version].index).Int()
}

func (p *Postgres[K, T]) notFound(key K) error {
	return fmt.Errorf("%w: %s key %s", ErrNotFound, short.Quote(p.table), p.m.quote(key))
}

// wrap translates a database error of op.
func (p *Postgres[K, T]) wrap(op string, key K, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01") {
		return fmt.Errorf("%w: %s %s key %s: %w", ErrAborted, op, short.Quote(p.table), p.m.quote(key), err)
	}
	return fmt.Errorf("occ: %s %s key %s: %w", op, short.Quote(p.table), p.m.quote(key), err)
}

// Load implements Store.
func (p *Postgres[K, T]) Load(ctx context.Context, key K) (T, int64, error) {
	var row T
	if err := p.m.checkKey(key); err != nil {
		return row, 0, err
	}
	err := p.db.QueryRow(ctx, p.sql.load, key).Scan(p.dest(&row)...)
	if errors.Is(err, pgx.ErrNoRows) {
		var zero T
		return zero, 0, p.notFound(key)
	}
	if err != nil {
		var zero T
		return zero, 0, p.wrap("load", key, err)
	}
	return row, p.versionOf(&row), nil
}

// current reads the version of key: (0, nil) when there is no row.
func (p *Postgres[K, T]) current(ctx context.Context, key K) (int64, error) {
	var v int64
	err := p.db.QueryRow(ctx, p.sql.version, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// Insert implements Store. With an ID it is one statement that inserts
// and records.
func (p *Postgres[K, T]) Insert(ctx context.Context, row T, opts ...Option) (int64, error) {
	rv := reflect.ValueOf(row)
	key, err := p.m.rowKey(rv)
	if err != nil {
		return 0, err
	}
	c, withID, err := p.call(newOptions(opts), OpInsert, key)
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, len(p.m.cols))
	for i, c := range p.m.cols {
		if i != p.m.version {
			args = append(args, rv.FieldByIndex(c.index).Interface())
		}
	}
	if failpoint.Mutant("occ.insert.conflict") {
		if _, err := p.db.Exec(ctx, p.render.Replace(sqlDeleteKey), key); err != nil {
			return 0, p.wrap("insert", key, err)
		}
	}
	if withID {
		return p.insertID(ctx, c, key, args)
	}
	// The row may vanish between the miss and the read that explains it;
	// then the insert is tried again.
	for attempt := 0; ; attempt++ {
		var v int64
		err := p.db.QueryRow(ctx, p.sql.insert, args...).Scan(&v)
		if err == nil {
			return v, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, p.wrap("insert", key, err)
		}
		cur, err := p.current(ctx, key)
		if err != nil {
			return 0, p.wrap("insert", key, err)
		}
		if cur > 0 || attempt == 2 {
			return 0, &ConflictError{Key: p.m.text(key), Expected: 0, Actual: cur}
		}
	}
}

// Update implements Store. With an ID it is one statement that locks the
// row, checks its version, records and writes.
func (p *Postgres[K, T]) Update(ctx context.Context, row T, version int64, opts ...Option) (int64, error) {
	if err := validVersion(version); err != nil {
		return 0, err
	}
	rv := reflect.ValueOf(row)
	key, err := p.m.rowKey(rv)
	if err != nil {
		return 0, err
	}
	if c, withID, err := p.call(newOptions(opts), OpUpdate, key); withID || err != nil {
		if err != nil {
			return 0, err
		}
		return p.updateID(ctx, c, key, rv, version)
	}
	sql := p.sql.update
	if failpoint.Mutant("occ.update.version") {
		sql = p.render.Replace(sqlUpdateAnyVersion)
	}
	var v int64
	err = p.db.QueryRow(ctx, sql, append(p.setArgs(rv), key, version)...).Scan(&v)
	if err == nil {
		return v, nil
	}
	return 0, p.miss(ctx, "update", key, version, err)
}

// miss explains a write that matched no row: ErrNotFound or a conflict.
func (p *Postgres[K, T]) miss(ctx context.Context, op string, key K, version int64, err error) error {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return p.wrap(op, key, err)
	}
	cur, err := p.current(ctx, key)
	switch {
	case err != nil:
		return p.wrap(op, key, err)
	case cur == 0:
		return p.notFound(key)
	}
	return &ConflictError{Key: p.m.text(key), Expected: version, Actual: cur}
}

// Delete implements Store. With an ID it is one statement that locks the
// row, checks its version, records and deletes.
func (p *Postgres[K, T]) Delete(ctx context.Context, key K, version int64, opts ...Option) error {
	if err := p.m.checkKey(key); err != nil {
		return err
	}
	if err := validVersion(version); err != nil {
		return err
	}
	if c, withID, err := p.call(newOptions(opts), OpDelete, key); withID || err != nil {
		if err != nil {
			return err
		}
		return p.deleteID(ctx, c, key, version)
	}
	sql := p.sql.del
	if failpoint.Mutant("occ.delete.version") {
		sql = p.render.Replace(sqlDeleteAnyVersion)
	}
	tag, err := p.db.Exec(ctx, sql, key, version)
	if err != nil {
		return p.wrap("delete", key, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return p.miss(ctx, "delete", key, version, nil)
}
