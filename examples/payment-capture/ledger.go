package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/clock"
	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
)

// ledger is the payment's capture records as the code sees them: the
// payments and captures tables, or variables when running on the memory
// backend.
type ledger interface {
	reset(ctx context.Context) error
	captured(ctx context.Context) (bool, error)
	record(ctx context.Context, charge string) error
	fencedCaptured(ctx context.Context, token int64) (bool, error)
	fencedRecord(ctx context.Context, token int64, charge string) error
	// recordIn records a capture in the transaction of the idempotency
	// claim (idempotency.TxFrom) and returns the payment's capture count.
	recordIn(ctx context.Context) (int, error)
	captures(ctx context.Context) (int, error)
}

// pgLedger is the payments and captures tables.
type pgLedger struct{ db *pgxpool.Pool }

// fence makes the payments table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "payments", Key: "id", TokenColumn: "fencing_token"}

func (l pgLedger) reset(ctx context.Context) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM captures WHERE payment = $1`, payment); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO payments (id, amount) VALUES ($1, $2)
			ON CONFLICT (id) DO UPDATE SET captured = false, fencing_token = 0`, payment, amount)
		return err
	})
}

func (l pgLedger) captured(ctx context.Context) (done bool, err error) {
	err = l.db.QueryRow(ctx, `SELECT captured FROM payments WHERE id = $1`, payment).Scan(&done)
	return done, err
}

// insertCapture adds a capture row in tx and returns the payment's capture
// count.
func insertCapture(ctx context.Context, tx pgx.Tx, charge *string) (n int, err error) {
	if _, err := tx.Exec(ctx, `INSERT INTO captures (payment, charge, amount) VALUES ($1, $2, $3)`, payment, charge, amount); err != nil {
		return 0, err
	}
	err = tx.QueryRow(ctx, `SELECT count(*) FROM captures WHERE payment = $1`, payment).Scan(&n)
	return n, err
}

func (l pgLedger) record(ctx context.Context, charge string) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE payments SET captured = true WHERE id = $1`, payment); err != nil {
			return err
		}
		_, err := insertCapture(ctx, tx, &charge)
		return err
	})
}

func (l pgLedger) fencedCaptured(ctx context.Context, token int64) (done bool, err error) {
	err = fence.Read(ctx, l.db, payment, token, "captured", &done)
	return done, err
}

func (l pgLedger) fencedRecord(ctx context.Context, token int64, charge string) error {
	return pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if err := fence.Update(ctx, tx, payment, token, "captured = true"); err != nil {
			return err
		}
		_, err := insertCapture(ctx, tx, &charge)
		return err
	})
}

func (l pgLedger) recordIn(ctx context.Context) (int, error) {
	tx, ok := idempotency.TxFrom(ctx)
	if !ok {
		return 0, errors.New("payment-capture: no idempotency transaction in the context")
	}
	if _, err := tx.Exec(ctx, `UPDATE payments SET captured = true WHERE id = $1`, payment); err != nil {
		return 0, err
	}
	return insertCapture(ctx, tx, nil)
}

func (l pgLedger) captures(ctx context.Context) (n int, err error) {
	err = l.db.QueryRow(ctx, `SELECT count(*) FROM captures WHERE payment = $1`, payment).Scan(&n)
	return n, err
}

// memLedger is the capture records in memory; its Row's gate plays the
// part of the token column.
type memLedger struct{ demo.Row[memCaptures] }

// memCaptures is whether the payment is captured, and its captures' charge
// IDs ("" for transactional mode).
type memCaptures struct {
	done     bool
	recorded []string
}

func (c *memCaptures) add(charge string) { c.done, c.recorded = true, append(c.recorded, charge) }

func (l *memLedger) reset(context.Context) error            { l.Set(memCaptures{}); return nil }
func (l *memLedger) captured(context.Context) (bool, error) { return l.Get().done, nil }
func (l *memLedger) captures(context.Context) (int, error)  { return len(l.Get().recorded), nil }
func (l *memLedger) record(_ context.Context, charge string) error {
	l.Update(func(c *memCaptures) { c.add(charge) })
	return nil
}

func (l *memLedger) fencedCaptured(_ context.Context, token int64) (bool, error) {
	c, err := l.FencedGet(token)
	return c.done, err
}

func (l *memLedger) fencedRecord(_ context.Context, token int64, charge string) error {
	return l.FencedUpdate(token, func(c *memCaptures) { c.add(charge) })
}

func (l *memLedger) recordIn(context.Context) (n int, err error) {
	l.Update(func(c *memCaptures) { c.add(""); n = len(c.recorded) })
	return n, nil
}

// newLedger returns the ledger of the lock-based code: the tables, or
// memory.
func newLedger(db *pgxpool.Pool) ledger {
	if db == nil {
		return &memLedger{}
	}
	return pgLedger{db}
}

// newTxSetup returns a transactional-mode executor and the ledger its work
// writes to. A duplicate waits at most 200ms for the execution in flight.
func newTxSetup(db *pgxpool.Pool) (idempotency.Executor, ledger, error) {
	const wait = 200 * time.Millisecond
	if db == nil {
		m, err := idempotency.NewMemory(&idempotency.MemoryConfig{InFlightWait: wait})
		return m, &memLedger{}, err
	}
	p, err := idempotency.NewPostgres(db, &idempotency.PostgresConfig{InFlightWait: wait})
	return p, pgLedger{db}, err
}

// newLeasedSetup returns the leased-mode store and the function that makes
// a paused attempt's lease expire on the memory backend (its clock jumps
// past the lease). On PostgreSQL the database clock decides: the retry gets
// 409 until the lease has run out.
func newLeasedSetup(db *pgxpool.Pool) (idempotency.LeaseStore, func(), error) {
	if db == nil {
		c := &clock.Manual{}
		m, err := idempotency.NewMemory(&idempotency.MemoryConfig{Clock: c})
		return m, func() { c.Advance(ttl) }, err
	}
	p, err := idempotency.NewPostgres(db, nil)
	return p, func() {}, err
}

// fingerprint identifies a capture request's payload, so that a key reused
// for another amount is refused.
func fingerprint(amount int64) idempotency.Fingerprint {
	return idempotency.NewFingerprint([]byte("capture"), []byte(payment), fmt.Appendf(nil, "%d", amount))
}
