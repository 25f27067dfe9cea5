package fencedlock

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/lockfree-go/lockfree/internal/failpoint"
	"github.com/lockfree-go/lockfree/internal/short"
)

// Fence makes updates of a user's table fenced: each row keeps the highest
// token that read or wrote it, and an update carrying a lower token changes
// nothing and returns a *FencedError. A read-modify-write under a lease reads
// with Read and writes with Update. The table needs a bigint token column (NOT
// NULL DEFAULT 0), e.g.
//
//	ALTER TABLE inventory ADD COLUMN fencing_token bigint NOT NULL DEFAULT 0;
//
// A Fence is a value, safe to copy and share.
type Fence struct {
	// Schema qualifies Table when set. Defaults to the search_path.
	Schema string
	// Table is the fenced table.
	Table string
	// Key is the column that identifies a row (the lock name's resource).
	Key string
	// TokenColumn is the column holding the highest token that read or
	// wrote the row. Defaults to "fencing_token".
	TokenColumn string
}

func (f Fence) names() (table, key, token string, err error) {
	if f.Table == "" || f.Key == "" {
		return "", "", "", fmt.Errorf("%w: fence needs a table and a key column", ErrInvalid)
	}
	tok := f.TokenColumn
	if tok == "" {
		tok = "fencing_token"
	}
	id := pgx.Identifier{f.Table}
	if f.Schema != "" {
		id = pgx.Identifier{f.Schema, f.Table}
	}
	return id.Sanitize(), pgx.Identifier{f.Key}.Sanitize(), pgx.Identifier{tok}.Sanitize(), nil
}

// Read is the fenced read that starts a read-modify-write under a lease:
//
//	UPDATE table SET token = <token> WHERE key = <key> AND token <= <token> RETURNING <columns>
//
// scanning the row's columns into dest. Raising the row's token as it reads
// matters: with a plain SELECT, a paused former holder could still write
// between this holder's read and write — its token is not yet stale at the
// resource — and this holder's write, computed from the older read, would
// silently overwrite it. After Read, every lower token is rejected. It returns
// a *FencedError or ErrNotFound like Update.
//
// columns is SQL text spliced into the statement as it is (a column list such
// as "qty, price"): it must be a constant of your program and never carry
// user input, which would be SQL injection. Only key and token are bound as
// arguments.
func (f Fence) Read(ctx context.Context, db DB, key any, token int64, columns string, dest ...any) error {
	table, keyCol, tokCol, err := f.names()
	if err != nil {
		return err
	}
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d", ErrInvalid, token)
	}
	if strings.TrimSpace(columns) == "" || len(dest) == 0 {
		return fmt.Errorf("%w: fenced read needs columns and destinations", ErrInvalid)
	}
	stamp := "$2"
	if failpoint.Mutant("fencedlock.fence.read.stamp") {
		stamp = tokCol // checks the token, raises nothing
	}
	sql := fmt.Sprintf("UPDATE %s SET %s = %s WHERE %s = $1 AND %s <= $2 RETURNING %s", table, tokCol, stamp, keyCol, tokCol, columns)
	err = db.QueryRow(ctx, sql, key, token).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return f.miss(ctx, db, table, keyCol, tokCol, key, token)
	}
	if err != nil {
		return fmt.Errorf("fencedlock: fenced read of %s: %w", table, err)
	}
	return nil
}

func (f Fence) miss(ctx context.Context, db DB, table, keyCol, tokCol string, key any, token int64) error {
	var current int64
	err := db.QueryRow(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE %s = $1", tokCol, table, keyCol), key).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %s %s", ErrNotFound, table, short.Quote(fmt.Sprint(key)))
	}
	if err != nil {
		return fmt.Errorf("fencedlock: fenced access to %s: %w", table, err)
	}
	return &FencedError{Presented: token, Required: current}
}

// Update runs
//
//	UPDATE table SET <set>, token = <token> WHERE key = <key> AND token <= <token>
//
// where set is the caller's SET list written with placeholders $1…$n for
// args (key and token are appended as $n+1 and $n+2). set is SQL text spliced
// into the statement as it is: it must be a constant of your program and
// never carry user input, which would be SQL injection — values, user-supplied
// or not, go in args. It returns nil when the
// row was updated, a *FencedError when the row has seen a higher token, and
// ErrNotFound when no row has that key. Equal tokens are admitted, so one
// tenure may write many times. Run it on the caller's transaction to combine
// it with other writes.
func (f Fence) Update(ctx context.Context, db DB, key any, token int64, set string, args ...any) error {
	table, keyCol, tokCol, err := f.names()
	if err != nil {
		return err
	}
	if token <= 0 {
		return fmt.Errorf("%w: fencing token %d", ErrInvalid, token)
	}
	if strings.TrimSpace(set) == "" {
		return fmt.Errorf("%w: empty SET list", ErrInvalid)
	}
	n := len(args)
	sql := fmt.Sprintf("UPDATE %s SET %s, %s = $%d WHERE %s = $%d AND %s <= $%d",
		table, set, tokCol, n+2, keyCol, n+1, tokCol, n+2)
	if failpoint.Mutant("fencedlock.fence.update.token") {
		sql = fmt.Sprintf("UPDATE %s SET %s, %s = $%d WHERE %s = $%d AND $%d::bigint IS NOT NULL",
			table, set, tokCol, n+2, keyCol, n+1, n+2)
	}
	tag, err := db.Exec(ctx, sql, append(append([]any(nil), args...), key, token)...)
	if err != nil {
		return fmt.Errorf("fencedlock: fenced update of %s: %w", table, err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	return f.miss(ctx, db, table, keyCol, tokCol, key, token)
}
