// Package migrate applies and prints the schema of lockfree's PostgreSQL
// backends.
//
// Every backend ships its SQL as numbered migrations ([Migration]) written
// against placeholder table names; [Names] says where the tables live (a schema,
// or the connection's search_path, and a prefix), so nothing assumes the public
// schema. [Up] applies the missing migrations of any number of packages in one
// transaction, serialised across processes by one advisory lock and
// recorded in a bookkeeping table; [Print] writes the same SQL for users of
// goose, tern or golang-migrate. Both take one set of migrations per
// package:
//
//	err := migrate.Up(ctx, pool, migrate.Names{}, fencedlock.Migrations(), idempotency.Migrations())
package migrate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/internal/short"
)

// DefaultPrefix is the table prefix used when Names.Prefix is empty.
const DefaultPrefix = "lockfree_"

// maxIdentifier is PostgreSQL's NAMEDATALEN-1: longer names are truncated
// silently by the server, which would make two tables collide.
const maxIdentifier = 63

// MaxBaseLen is the longest base name (the part after the prefix, such as
// "locks" or "partition_incarnations") that Validate leaves room for: a
// prefix may be at most 63 − MaxBaseLen bytes long.
const MaxBaseLen = 30

// ErrInvalidName reports a schema or prefix that cannot name a table.
var ErrInvalidName = errors.New("migrate: invalid name")

// Names says where lockfree's tables live. The zero value means unqualified
// names (resolved through the connection's search_path) with the prefix
// "lockfree_". Names is a value; it is safe to copy and share.
type Names struct {
	// Schema qualifies every table when set. Defaults to none (search_path).
	Schema string
	// Prefix starts every table, sequence and index name. Defaults to "lockfree_".
	Prefix string
}

func (n Names) prefix() string {
	if n.Prefix == "" {
		return DefaultPrefix
	}
	return n.Prefix
}

// identifier is what Validate admits in a schema or prefix: the characters
// of an unquoted PostgreSQL identifier. Names also end up inside SQL string
// literals (a regclass argument, a NOTIFY channel), where a quote or a NUL
// would be dangerous, so nothing else is allowed even though quoting would
// make it a valid identifier.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate reports whether every name built from n is a PostgreSQL
// identifier that needs no escaping: the schema (when set) and the prefix
// must match [A-Za-z_][A-Za-z0-9_]*, the schema be at most 63 bytes and the
// prefix at most 63 − MaxBaseLen, so that prefix and base name stay within
// PostgreSQL's 63-byte identifiers. Up and Print also check the exact names
// of the migrations they render. The error matches ErrInvalidName.
func (n Names) Validate() error {
	if n.Schema != "" {
		if err := validIdent("schema", n.Schema, maxIdentifier); err != nil {
			return err
		}
	}
	return validIdent("prefix", n.prefix(), maxIdentifier-MaxBaseLen)
}

func validIdent(what, s string, maxLen int) error {
	if len(s) > maxLen {
		return fmt.Errorf("%w: %s %s is %d bytes, longer than %d", ErrInvalidName, what, short.Quote(s), len(s), maxLen)
	}
	if !identifier.MatchString(s) {
		return fmt.Errorf("%w: %s %s is not an identifier ([A-Za-z_][A-Za-z0-9_]*)", ErrInvalidName, what, short.Quote(s))
	}
	return nil
}

// validFor reports whether every name the migrations ms use fits in a
// PostgreSQL identifier with n's prefix.
func (n Names) validFor(ms []Migration) error {
	for _, m := range ms {
		for _, sql := range []string{m.Up, m.Down} {
			for _, parts := range placeholder.FindAllStringSubmatch(sql, -1) {
				if name := n.prefix() + parts[2]; len(name) > maxIdentifier {
					return fmt.Errorf("%w: %s %d: %s is %d bytes, longer than PostgreSQL's %d",
						ErrInvalidName, m.Package, m.Version, short.Quote(name), len(name), maxIdentifier)
				}
			}
		}
	}
	return nil
}

// Table returns the quoted, qualified name of the table (or sequence) base.
func (n Names) Table(base string) string {
	if n.Schema == "" {
		return pgx.Identifier{n.prefix() + base}.Sanitize()
	}
	return pgx.Identifier{n.Schema, n.prefix() + base}.Sanitize()
}

// Bare returns the quoted, unqualified name for base: what CREATE INDEX and
// constraint names need, and what pg_notify channel names use.
func (n Names) Bare(base string) string {
	return pgx.Identifier{n.prefix() + base}.Sanitize()
}

// Raw returns the unquoted name for base, as a string value (a NOTIFY
// channel): bind it as a query argument rather than splicing it into SQL.
func (n Names) Raw(base string) string { return n.prefix() + base }

// Migration is one numbered schema change of one package. Up and Down are SQL
// in which {{x}} stands for Names.Table("x"), {{bare x}} for Names.Bare("x"),
// {{raw x}} for Names.Raw("x") with its quotes doubled (the content of a
// string literal: write '{{raw x}}') and {{regclass x}} for Names.Table("x")
// as a quoted string literal (the argument of nextval).
type Migration struct {
	Package string // the package that owns it, e.g. "fencedlock"
	Version int    // 1, 2, …; applied in order within a package
	Name    string // a short description
	Up      string
	Down    string
}

var placeholder = regexp.MustCompile(`\{\{(bare |raw |regclass )?([a-z_][a-z0-9_]*)\}\}`)

// Render returns sql with its placeholders replaced by names from n. It
// quotes what it substitutes, so even names that Validate would refuse cannot
// end an identifier or a string literal early; validate n first all the same.
func Render(sql string, n Names) string {
	return placeholder.ReplaceAllStringFunc(sql, func(m string) string {
		parts := placeholder.FindStringSubmatch(m)
		switch parts[1] {
		case "bare ":
			return n.Bare(parts[2])
		case "raw ":
			// Inside a string literal: a quote in the name must not end it.
			return strings.ReplaceAll(n.Raw(parts[2]), "'", "''")
		case "regclass ":
			// A string literal naming the relation, for nextval() and friends.
			return "'" + strings.ReplaceAll(n.Table(parts[2]), "'", "''") + "'"
		}
		return n.Table(parts[2])
	})
}

// DB is what Up needs: *pgxpool.Pool, *pgx.Conn and pgx.Tx satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

const bookkeeping = `CREATE TABLE IF NOT EXISTS {{migrations}} (
	package    text        NOT NULL,
	version    integer     NOT NULL,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT clock_timestamp(),
	PRIMARY KEY (package, version)
)`

// sqlLock serialises every lockfree migration in the database: one lock,
// taken once per Up.
const (
	sqlLock    = `SELECT pg_advisory_xact_lock(hashtext('lockfree.migrate'))`
	sqlApplied = `SELECT EXISTS (SELECT 1 FROM {{migrations}} WHERE package = $1 AND version = $2)`
	sqlRecord  = `INSERT INTO {{migrations}} (package, version, name) VALUES ($1, $2, $3)`
)

// Up applies the migrations of sets (one set per package, such as
// fencedlock.Migrations()) that are not yet recorded, in package then version
// order:
//
//	err := migrate.Up(ctx, pool, names, fencedlock.Migrations(), idempotency.Migrations())
//
// A migration given twice (the same package and version, the same SQL) is
// applied once; two different migrations under one package and version are
// an error. Everything runs in one transaction under one transaction-scoped
// advisory lock, so concurrent calls (several services starting at once)
// apply each migration once, and a failure leaves the schema as it was. Up
// returns the first error.
func Up(ctx context.Context, db DB, n Names, sets ...[]Migration) error {
	ordered, err := prepare(n, sets)
	if err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlLock); err != nil {
			return fmt.Errorf("migrate: lock: %w", err)
		}
		if _, err := tx.Exec(ctx, Render(bookkeeping, n)); err != nil {
			return fmt.Errorf("migrate: bookkeeping table: %w", err)
		}
		for _, m := range ordered {
			if err := apply(ctx, tx, n, m); err != nil {
				return fmt.Errorf("migrate: %s %d (%s): %w", m.Package, m.Version, m.Name, err)
			}
		}
		return nil
	})
}

// prepare validates n and returns the migrations of sets, deduplicated and
// sorted.
func prepare(n Names, sets [][]Migration) ([]Migration, error) {
	if err := n.Validate(); err != nil {
		return nil, err
	}
	ordered, err := sorted(slices.Concat(sets...))
	if err != nil {
		return nil, err
	}
	if err := n.validFor(ordered); err != nil {
		return nil, err
	}
	return ordered, nil
}

func apply(ctx context.Context, tx pgx.Tx, n Names, m Migration) error {
	var done bool
	if err := tx.QueryRow(ctx, Render(sqlApplied, n), m.Package, m.Version).Scan(&done); err != nil || done {
		return err
	}
	if _, err := tx.Exec(ctx, Render(m.Up, n)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, Render(sqlRecord, n), m.Package, m.Version, m.Name)
	return err
}

// sorted returns ms in package then version order, without repeats.
func sorted(ms []Migration) ([]Migration, error) {
	out := slices.Clone(ms)
	slices.SortStableFunc(out, func(a, b Migration) int {
		return cmp.Or(cmp.Compare(a.Package, b.Package), cmp.Compare(a.Version, b.Version))
	})
	var err error
	out = slices.CompactFunc(out, func(a, b Migration) bool {
		if a.Package != b.Package || a.Version != b.Version {
			return false
		}
		if a != b && err == nil {
			err = fmt.Errorf("migrate: two different migrations %s %d", short.Quote(a.Package), a.Version)
		}
		return true
	})
	if err != nil {
		return nil, err
	}
	for _, m := range out {
		if m.Package == "" || m.Version < 1 || strings.TrimSpace(m.Up) == "" {
			return nil, fmt.Errorf("migrate: malformed migration %s %d", short.Quote(m.Package), m.Version)
		}
	}
	return out, nil
}

// Print writes the up migrations of sets (or the down migrations in reverse
// order when down is true) as plain SQL with their names filled in from n,
// one commented block per migration, for use with another migration tool.
// Sets are deduplicated and ordered as by Up.
func Print(w io.Writer, n Names, down bool, sets ...[]Migration) error {
	ordered, err := prepare(n, sets)
	if err != nil {
		return err
	}
	if down {
		for i, j := 0, len(ordered)-1; i < j; i, j = i+1, j-1 {
			ordered[i], ordered[j] = ordered[j], ordered[i]
		}
	}
	for _, m := range ordered {
		sql := m.Up
		if down {
			sql = m.Down
		}
		if _, err := fmt.Fprintf(w, "-- lockfree %s %03d: %s\n%s;\n\n", m.Package, m.Version, m.Name,
			strings.TrimRight(strings.TrimSpace(Render(sql, n)), ";")); err != nil {
			return err
		}
	}
	return nil
}
