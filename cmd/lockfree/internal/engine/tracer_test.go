package engine

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/internal/testdb"
)

// The tracer counts what a hand count of each pgx flow says: a statement's
// first use on a connection costs a prepare, a transaction's BEGIN and
// COMMIT are statements, a batch is one round trip.
func TestTracerCountsRoundTrips(t *testing.T) {
	db := testdb.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE t (k int PRIMARY KEY, v int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns, pc.MinConns = 1, 0
	tr := &Tracer{}
	pc.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	const insert = `INSERT INTO t (k, v) VALUES ($1, 0) ON CONFLICT DO NOTHING`
	const bump = `UPDATE t SET v = v + 1 WHERE k = $1 RETURNING v`
	steps := []struct {
		name              string
		run               func() error
		trips, statements int64
	}{
		{"first Exec: prepare + execute", func() error { _, err := pool.Exec(ctx, insert, 1); return err }, 2, 1},
		{"Exec again: cached", func() error { _, err := pool.Exec(ctx, insert, 2); return err }, 1, 1},
		{"first QueryRow: prepare + execute", func() error { var v int; return pool.QueryRow(ctx, bump, 1).Scan(&v) }, 2, 1},
		{"QueryRow again", func() error { var v int; return pool.QueryRow(ctx, bump, 1).Scan(&v) }, 1, 1},
		{"transaction of one statement: BEGIN, it, COMMIT", func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { var v int; return tx.QueryRow(ctx, bump, 2).Scan(&v) })
		}, 3, 3},
		{"batch of three cached statements", func() error {
			b := &pgx.Batch{}
			b.Queue(bump, 1)
			b.Queue(bump, 2)
			b.Queue(insert, 3)
			return pool.SendBatch(ctx, b).Close()
		}, 1, 3},
		{"simple protocol: one round trip, no prepare", func() error {
			_, err := pool.Exec(ctx, `SELECT 1`, pgx.QueryExecModeSimpleProtocol)
			return err
		}, 1, 1},
	}
	for _, s := range steps {
		before := tr.Counts()
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		after := tr.Counts()
		if got := after.RoundTrips - before.RoundTrips; got != s.trips {
			t.Errorf("%s: %d round trips, want %d", s.name, got, s.trips)
		}
		if got := after.Statements - before.Statements; got != s.statements {
			t.Errorf("%s: %d statements, want %d", s.name, got, s.statements)
		}
	}
	if c := tr.Counts().Connects; c != 1 {
		t.Errorf("%d connects, want 1 (the pool's one connection)", c)
	}
}
