package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/examples/internal/demo"
	"github.com/lockfree-go/lockfree/fencedlock"
)

// shelf is the stock of sku as the lock-based code sees it: the inventory
// table, or a variable when running on the memory backend.
type shelf interface {
	reset(ctx context.Context, qty int64) error
	read(ctx context.Context) (int64, error)
	write(ctx context.Context, qty int64) error
	fencedRead(ctx context.Context, token int64) (int64, error)
	fencedWrite(ctx context.Context, token, qty int64) error
}

func newShelf(db *pgxpool.Pool) shelf {
	if db == nil {
		return &memShelf{}
	}
	return pgShelf{db}
}

// pgShelf is the inventory table.
type pgShelf struct{ db *pgxpool.Pool }

// fence makes the inventory table's reads and writes fenced by token.
var fence = fencedlock.Fence{Table: "inventory", Key: "sku", TokenColumn: "fencing_token"}

func (s pgShelf) reset(ctx context.Context, qty int64) error {
	_, err := s.db.Exec(ctx, `INSERT INTO inventory (sku, quantity) VALUES ($1, $2)
		ON CONFLICT (sku) DO UPDATE SET quantity = $2, fencing_token = 0`, sku, qty)
	return err
}

func (s pgShelf) read(ctx context.Context) (qty int64, err error) {
	err = s.db.QueryRow(ctx, `SELECT quantity FROM inventory WHERE sku = $1`, sku).Scan(&qty)
	return qty, err
}

func (s pgShelf) write(ctx context.Context, qty int64) error {
	_, err := s.db.Exec(ctx, `UPDATE inventory SET quantity = $2 WHERE sku = $1`, sku, qty)
	return err
}

func (s pgShelf) fencedRead(ctx context.Context, token int64) (qty int64, err error) {
	err = fence.Read(ctx, s.db, sku, token, "quantity", &qty)
	return qty, err
}

func (s pgShelf) fencedWrite(ctx context.Context, token, qty int64) error {
	return fence.Update(ctx, s.db, sku, token, "quantity = $1", qty)
}

// memShelf is the stock in memory; its Row's gate plays the part of the
// token column.
type memShelf struct{ demo.Row[int64] }

func (s *memShelf) reset(_ context.Context, qty int64) error { s.Set(qty); return nil }
func (s *memShelf) read(context.Context) (int64, error)      { return s.Get(), nil }
func (s *memShelf) write(_ context.Context, qty int64) error { s.Set(qty); return nil }
func (s *memShelf) fencedRead(_ context.Context, token int64) (int64, error) {
	return s.FencedGet(token)
}
func (s *memShelf) fencedWrite(_ context.Context, token, qty int64) error {
	return s.FencedUpdate(token, func(q *int64) { *q = qty })
}

// newAtomicSetup returns the conditional-decrement store and the functions
// that put the stock on it and read what is left.
func newAtomicSetup(db *pgxpool.Pool) (atomic.Store, stockOps) {
	if db == nil {
		inv, err := atomic.NewMemory(nil) // the default floor, 0: never below zero
		if err != nil {
			panic(err) // a nil config is valid
		}
		return inv, stockOps{
			reset: func(ctx context.Context) error { return inv.Claim(ctx, sku, stock) },
			left:  func(ctx context.Context) (int64, error) { return inv.Value(ctx, sku) },
		}
	}
	inv, err := atomic.NewPostgres(db, atomic.Table{Name: "inventory", Key: "sku", Value: "quantity"})
	if err != nil {
		panic(err) // the table config is a constant
	}
	return inv, stockOps{
		reset: func(ctx context.Context) error { return pgShelf{db}.reset(ctx, stock) },
		left:  func(ctx context.Context) (int64, error) { return inv.Value(ctx, sku) },
	}
}

// stockOps puts the stock on the shelf before a sale and reads what is left
// after it.
type stockOps struct {
	reset func(context.Context) error
	left  func(context.Context) (int64, error)
}

func shelfOps(s shelf) stockOps {
	return stockOps{reset: func(ctx context.Context) error { return s.reset(ctx, stock) }, left: s.read}
}
