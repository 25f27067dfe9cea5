// Package fence holds the schema that every package minting fences in
// PostgreSQL shares — fencedlock tokens, partition epochs and incarnations,
// the tokens and epochs of idempotency's leased mode, the singlewriter
// inbox's epochs — and turns the errors of its functions into typed ones.
//
// A fence is minted in an era, the WAL timeline the server writes on plus an
// offset that only grows, and is at least era·2^40:
//
//	fence_mint(seq)  = fence_era()·2^40 + nextval(seq)        -- replaces nextval(seq)
//	fence_next(prev) = greatest(prev + 1, fence_era()·2^40)   -- replaces prev + 1
//
// A promotion starts a higher timeline, so what the promoted server mints
// exceeds what the old primary minted, even the values whose WAL it never
// received; fence_era fails rather than let the era go back when the
// database moves to a cluster with a lower timeline, and fence_advance moves
// on to a new era after a failover that creates no timeline. fence_era is an
// SQL function that PostgreSQL inlines into the minting statement: when the
// era it reads is the one already recorded and the server is a primary, it
// returns it without a call; everything else (a standby, a new era, one that
// went back, one past 23 bits) goes to the PL/pgSQL fence_era_checked, which
// checks, records and refuses as described. docs/failover.md
// states the mechanism and its limits; internal/failover tests them on a
// real primary and standby.
//
// Each package's Migrations() includes [Migrations]: migrate.Up applies a
// migration given twice once, so the functions are installed once whatever
// packages an application migrates. Their package name, "fence", sorts
// before every package that uses them.
package fence

import (
	"embed"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/migrate"
)

// EraShift is the position of the era in a fence: a fence minted in era e
// is at least e << EraShift. Eras range over [0, 2^(63-EraShift)).
const EraShift = 40

// EraSize is 2^EraShift: a fence minted in era e is at least e·EraSize,
// and an era holds EraSize fences.
const EraSize = int64(1) << EraShift

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the schema of the fence functions (package "fence"):
// the sequences fence_offset and fence_eras, and the functions fence_era,
// fence_era_checked, fence_mint, fence_next and fence_advance. Migration 2
// (the fast path of fence_era) changes no sequence: no fence goes back
// across it or its down migration.
func Migrations() []migrate.Migration {
	return migrate.FromDir("fence", migrationFiles, "migrations")
}

var (
	// ErrEra reports a fence the database refused to mint because it could
	// be lower than one already handed out: the database moved to a cluster
	// whose timeline is below the era it had reached (a restore, an
	// upgrade), or an epoch reached the end of its era. Minting fails until
	// an operator runs fence_advance.
	ErrEra = errors.New("lockfree: no fence can be minted until fence_advance runs")
	// ErrReadOnly reports a fence that could not be minted because the
	// server is read-only: a standby, or a read-only transaction.
	ErrReadOnly = errors.New("lockfree: cannot mint a fence on a read-only server")
)

// SQLSTATEs of the fence functions.
const (
	codeEra      = "55000" // object_not_in_prerequisite_state
	codeReadOnly = "25006" // read_only_sql_transaction
	// messagePrefix starts the messages of the fence functions' own errors:
	// 55000 has other causes (currval before nextval, for one).
	messagePrefix = "lockfree: "
)

// Error is a fence the database refused to mint. It matches its Kind,
// [ErrEra] or [ErrReadOnly], with errors.Is, and unwraps to the server's
// error. Its message says what an operator does about it.
type Error struct {
	// Kind is ErrEra or ErrReadOnly.
	Kind error
	// Advance is, for ErrEra, the statement that moves fences on to a new
	// era, with the tables' schema and prefix: SELECT "lockfree_fence_advance"().
	Advance string
	// Err is the server's error.
	Err *pgconn.PgError
}

func (e *Error) Error() string {
	detail := strings.TrimPrefix(e.Err.Message, messagePrefix)
	if e.Kind == ErrReadOnly {
		return e.Kind.Error() + ": " + detail +
			" (connected to a standby? connect to the primary, e.g. with target_session_attrs=read-write)"
	}
	return e.Kind.Error() + ": " + detail + "; once every server of the old cluster is gone, run " +
		e.Advance + " on the new primary"
}

// Is reports whether target is e's Kind.
func (e *Error) Is(target error) bool { return target == e.Kind }

// Unwrap returns the server's error.
func (e *Error) Unwrap() error { return e.Err }

// Check returns err as an *Error when it is a refusal to mint a fence —
// SQLSTATE 55000 from a fence function, or 25006 — and err unchanged
// otherwise (nil included). names are the tables' schema and prefix, for the
// fence_advance statement the message gives.
func Check(err error, names migrate.Names) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return err
	}
	switch {
	case pgErr.Code == codeReadOnly:
		return &Error{Kind: ErrReadOnly, Err: pgErr}
	case pgErr.Code == codeEra && strings.HasPrefix(pgErr.Message, messagePrefix):
		return &Error{Kind: ErrEra, Advance: "SELECT " + names.Table("fence_advance") + "()", Err: pgErr}
	}
	return err
}
