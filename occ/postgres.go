package occ

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/fencedlock"
)

// DB is what the PostgreSQL backend needs from a connection:
// *pgxpool.Pool, *pgx.Conn and pgx.Tx all satisfy it, so every operation can
// run inside the caller's own transaction.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Postgres is a Store on the user's own PostgreSQL table: every db-tagged
// field of T is a column, one of them the key and one the version. Each
// operation is one statement (plus a read of the current version when it
// misses, to tell a conflict from a missing row). It is safe for concurrent
// use.
type Postgres[T any] struct {
	db  DB
	m   *mapping
	cfg TableConfig
	sql struct {
		load, insert, update, del, current, unfenced string
		fencedSet                                    string
	}
}

// NewPostgres returns a store of T rows in cfg.Table on db. The table is the
// user's: nothing is created; it needs the key column (primary key or unique)
// and a bigint version column. A bad mapping or identifier is an ErrInvalid.
func NewPostgres[T any](db DB, cfg TableConfig) (*Postgres[T], error) {
	cfg = cfg.withDefaults()
	if err := validIdent("table", cfg.Table, true); err != nil {
		return nil, err
	}
	if err := validIdent("schema", cfg.Schema, false); err != nil {
		return nil, err
	}
	if db == nil {
		return nil, fmt.Errorf("%w: nil DB", ErrInvalid)
	}
	m, err := newMapping[T](cfg)
	if err != nil {
		return nil, err
	}
	p := &Postgres[T]{db: db, m: m, cfg: cfg}
	table := pgx.Identifier{cfg.Table}
	if cfg.Schema != "" {
		table = pgx.Identifier{cfg.Schema, cfg.Table}
	}
	t := table.Sanitize()
	q := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	key, ver := q(cfg.Key), q(cfg.Version)

	var all, ins, vals, set []string
	n := 0
	for i, c := range m.cols {
		all = append(all, q(c.name))
		if i == m.version {
			continue
		}
		n++
		ins = append(ins, q(c.name))
		vals = append(vals, fmt.Sprintf("$%d", n))
		if i != m.key {
			set = append(set, fmt.Sprintf("%s = $%d", q(c.name), len(set)+1))
		}
	}
	set = append(set, ver+" = "+ver+" + 1")
	ns := len(set) // the SET list's arguments are $1…$(ns-1)

	p.sql.load = fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", strings.Join(all, ", "), t, key)
	p.sql.insert = fmt.Sprintf("INSERT INTO %s (%s, %s) VALUES (%s, 1) ON CONFLICT (%s) DO NOTHING RETURNING %s",
		t, strings.Join(ins, ", "), ver, strings.Join(vals, ", "), key, ver)
	p.sql.update = fmt.Sprintf("UPDATE %s SET %s WHERE %s = $%d AND %s = $%d RETURNING %s",
		t, strings.Join(set, ", "), key, ns, ver, ns+1, ver)
	p.sql.del = fmt.Sprintf("DELETE FROM %s WHERE %s = $1 AND %s = $2", t, key, ver)
	p.sql.current = fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", ver, t, key)
	p.sql.unfenced = fmt.Sprintf("UPDATE %s SET %s WHERE %s = $%d RETURNING %s", t, strings.Join(set, ", "), key, ns, ver)
	p.sql.fencedSet = strings.Join(set, ", ")
	return p, nil
}

// WithDB returns a store that runs its statements on db — typically the
// caller's transaction — with the same configuration.
func (p *Postgres[T]) WithDB(db DB) *Postgres[T] {
	c := *p
	c.db = db
	return &c
}

func (p *Postgres[T]) layout() *mapping { return p.m }

// setArgs returns the values of row's SET columns (all but key and version).
func (p *Postgres[T]) setArgs(row reflect.Value) []any {
	args := make([]any, 0, len(p.m.cols))
	for i, c := range p.m.cols {
		if i != p.m.key && i != p.m.version {
			args = append(args, row.FieldByIndex(c.index).Interface())
		}
	}
	return args
}

// wrap translates a database error of op.
func (p *Postgres[T]) wrap(op string, key any, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) && (pg.Code == "40001" || pg.Code == "40P01") {
		return fmt.Errorf("%w: %s %s key %s: %w", ErrAborted, op, p.cfg.Table, quoteKey(key), err)
	}
	return fmt.Errorf("occ: %s %s key %s: %w", op, p.cfg.Table, quoteKey(key), err)
}

// Load implements Store.
func (p *Postgres[T]) Load(ctx context.Context, key any) (T, int64, error) {
	var row T
	k, err := p.m.normKey(key)
	if err != nil {
		return row, 0, err
	}
	rv := reflect.ValueOf(&row).Elem()
	dest := make([]any, len(p.m.cols))
	for i, c := range p.m.cols {
		dest[i] = rv.FieldByIndex(c.index).Addr().Interface()
	}
	err = p.db.QueryRow(ctx, p.sql.load, k).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		var zero T
		return zero, 0, fmt.Errorf("%w: %s key %s", ErrNotFound, p.cfg.Table, quoteKey(key))
	}
	if err != nil {
		var zero T
		return zero, 0, p.wrap("load", key, err)
	}
	return row, rv.FieldByIndex(p.m.cols[p.m.version].index).Int(), nil
}

// current reads the version of key: (0, nil) when there is no row.
func (p *Postgres[T]) current(ctx context.Context, key any) (int64, error) {
	var v int64
	err := p.db.QueryRow(ctx, p.sql.current, key).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return v, err
}

// Insert implements Store.
func (p *Postgres[T]) Insert(ctx context.Context, row T) (int64, error) {
	rv := reflect.ValueOf(row)
	key, err := p.m.rowKey(rv)
	if err != nil {
		return 0, err
	}
	args := make([]any, 0, len(p.m.cols))
	for i, c := range p.m.cols {
		if i != p.m.version {
			args = append(args, rv.FieldByIndex(c.index).Interface())
		}
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
			return 0, &ConflictError{Key: key, Expected: 0, Actual: cur}
		}
	}
}

// Update implements Store.
func (p *Postgres[T]) Update(ctx context.Context, row T, version int64) (int64, error) {
	if err := validVersion(version); err != nil {
		return 0, err
	}
	rv := reflect.ValueOf(row)
	key, err := p.m.rowKey(rv)
	if err != nil {
		return 0, err
	}
	args := append(p.setArgs(rv), key, version)
	var v int64
	err = p.db.QueryRow(ctx, p.sql.update, args...).Scan(&v)
	if err == nil {
		return v, nil
	}
	return 0, p.miss(ctx, "update", key, version, err)
}

// miss explains a write that matched no row: ErrNotFound or a conflict.
func (p *Postgres[T]) miss(ctx context.Context, op string, key any, version int64, err error) error {
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return p.wrap(op, key, err)
	}
	cur, err := p.current(ctx, key)
	switch {
	case err != nil:
		return p.wrap(op, key, err)
	case cur == 0:
		return fmt.Errorf("%w: %s key %s", ErrNotFound, p.cfg.Table, quoteKey(key))
	}
	return &ConflictError{Key: key, Expected: version, Actual: cur}
}

// Delete implements Store.
func (p *Postgres[T]) Delete(ctx context.Context, key any, version int64) error {
	k, err := p.m.normKey(key)
	if err != nil {
		return err
	}
	if err := validVersion(version); err != nil {
		return err
	}
	tag, err := p.db.Exec(ctx, p.sql.del, k, version)
	if err != nil {
		return p.wrap("delete", key, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return p.miss(ctx, "delete", k, version, nil)
}

// writeLocked is the Fenced twin's write: with fenced, through
// fencedlock.Fence (the table needs the token column); without, the naive
// unconditional UPDATE. It returns the version the write produced, assuming
// only lock holders write the row.
func (p *Postgres[T]) writeLocked(ctx context.Context, row T, loaded int64, fence fencedlock.Fence, token int64, fenced bool) (int64, error) {
	rv := reflect.ValueOf(row)
	key := p.m.keyOf(rv)
	args := p.setArgs(rv)
	if !fenced {
		var v int64
		err := p.db.QueryRow(ctx, p.sql.unfenced, append(args, key)...).Scan(&v)
		if errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("%w: %s key %s", ErrNotFound, p.cfg.Table, quoteKey(key))
		}
		if err != nil {
			return 0, p.wrap("write", key, err)
		}
		return v, nil
	}
	err := fence.Update(ctx, p.db, key, token, p.sql.fencedSet, args...)
	if errors.Is(err, fencedlock.ErrNotFound) {
		return 0, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	if err != nil {
		return 0, err
	}
	return loaded + 1, nil
}
