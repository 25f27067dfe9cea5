package occ_test

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/occ"
)

// nopDB fails every statement: for tests that must not reach the database.
type nopDB struct{}

func (nopDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	panic("nopDB used")
}
func (nopDB) Query(context.Context, string, ...any) (pgx.Rows, error) { panic("nopDB used") }
func (nopDB) QueryRow(context.Context, string, ...any) pgx.Row        { panic("nopDB used") }
func (nopDB) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults  { panic("nopDB used") }

type nopLocks struct{ fencedlock.Store }

// foreign is an occ.Store[int32, item] from elsewhere.
type foreign struct{}

func (foreign) Load(context.Context, int32) (item, int64, error)           { return item{}, 0, nil }
func (foreign) Insert(context.Context, item, ...occ.Option) (int64, error) { return 0, nil }
func (foreign) Update(context.Context, item, int64, ...occ.Option) (int64, error) {
	return 0, nil
}
func (foreign) Delete(context.Context, int32, int64, ...occ.Option) error { return nil }
