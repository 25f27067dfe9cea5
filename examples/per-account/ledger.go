package main

import (
	"context"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/partition"
)

// ledger is account's ledger as the code sees it: the accounts and entries
// tables, or a slice when running on the memory backend.
type ledger interface {
	reset(ctx context.Context) error
	last(ctx context.Context) (int64, error)
	append(ctx context.Context, seq int64) error
	fencedLast(ctx context.Context, token int64) (int64, error)
	fencedAppend(ctx context.Context, token, seq int64) error
	verifiedAppend(ctx context.Context, e partition.Epoch, seq int64) error
	entries(ctx context.Context) ([]int64, error)
}

// pgLedger is the accounts and entries tables.
type pgLedger struct {
	db     *pgxpool.Pool
	verify *partition.Postgres // the membership store, for verifiedAppend
}

// fence makes the accounts table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "accounts", Key: "id", TokenColumn: "fencing_token"}

func (l *pgLedger) reset(ctx context.Context) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM entries WHERE account = $1`, account); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO accounts (id) VALUES ($1)
			ON CONFLICT (id) DO UPDATE SET last_seq = 0, fencing_token = 0`, account)
		return err
	})
}

func (l *pgLedger) last(ctx context.Context) (seq int64, err error) {
	err = l.db.QueryRow(ctx, `SELECT last_seq FROM accounts WHERE id = $1`, account).Scan(&seq)
	return seq, err
}

// write adds entry seq and records it as the last, in tx.
func write(ctx context.Context, tx pgx.Tx, seq int64) error {
	if _, err := tx.Exec(ctx, `INSERT INTO entries (account, seq) VALUES ($1, $2)`, account, seq); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE accounts SET last_seq = $2 WHERE id = $1`, account, seq)
	return err
}

func (l *pgLedger) append(ctx context.Context, seq int64) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error { return write(ctx, tx, seq) })
}

func (l *pgLedger) fencedLast(ctx context.Context, token int64) (seq int64, err error) {
	err = fence.Read(ctx, l.db, account, token, "last_seq", &seq)
	return seq, err
}

func (l *pgLedger) fencedAppend(ctx context.Context, token, seq int64) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if err := fence.Update(ctx, tx, account, token, "last_seq = $1", seq); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO entries (account, seq) VALUES ($1, $2)`, account, seq)
		return err
	})
}

func (l *pgLedger) verifiedAppend(ctx context.Context, e partition.Epoch, seq int64) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		// Share-locks the partition's ownership row until commit: a new
		// owner's claim waits for this transaction; a stale epoch fails.
		if err := l.verify.Verify(ctx, tx, e); err != nil {
			return err
		}
		return write(ctx, tx, seq)
	})
}

func (l *pgLedger) entries(ctx context.Context) ([]int64, error) {
	rows, err := l.db.Query(ctx, `SELECT seq FROM entries WHERE account = $1 ORDER BY id`, account)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int64])
}

// memLedger is the ledger in memory; its Row's gate plays the part of the
// token column, and the memory membership store's Verify that of the
// ownership row.
type memLedger struct {
	demo.Row[memEntries]
	verify *partition.Memory
}

// memEntries are the account's entries and the last number written.
type memEntries struct {
	seqs []int64
	last int64
}

func (e *memEntries) add(seq int64) { e.seqs, e.last = append(e.seqs, seq), seq }

func (l *memLedger) reset(context.Context) error         { l.Set(memEntries{}); return nil }
func (l *memLedger) last(context.Context) (int64, error) { return l.Get().last, nil }
func (l *memLedger) append(_ context.Context, seq int64) error {
	l.Update(func(e *memEntries) { e.add(seq) })
	return nil
}

func (l *memLedger) fencedLast(_ context.Context, token int64) (int64, error) {
	e, err := l.FencedGet(token)
	return e.last, err
}

func (l *memLedger) fencedAppend(_ context.Context, token, seq int64) error {
	return l.FencedUpdate(token, func(e *memEntries) { e.add(seq) })
}

func (l *memLedger) verifiedAppend(ctx context.Context, e partition.Epoch, seq int64) error {
	return l.verify.Verify(e, func() error { return l.append(ctx, seq) })
}

func (l *memLedger) entries(context.Context) ([]int64, error) { return slices.Clone(l.Get().seqs), nil }

// newLedger returns the ledger of the lock-based code: the tables, or
// memory.
func newLedger(db *pgxpool.Pool) ledger {
	if db == nil {
		return &memLedger{}
	}
	return &pgLedger{db: db}
}

// newPartitionSetup returns the ledger and the membership store, which the
// ledger's verifiedAppend checks epochs against.
func newPartitionSetup(db *pgxpool.Pool) (ledger, partition.Membership, error) {
	if db == nil {
		store, err := partition.NewMemory(nil)
		return &memLedger{verify: store}, store, err
	}
	store, err := partition.NewPostgres(db, nil)
	if err != nil {
		return nil, nil, err
	}
	return &pgLedger{db: db, verify: store}, store, nil
}
