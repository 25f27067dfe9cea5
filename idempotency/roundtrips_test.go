package idempotency_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/idempotency"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// roundTrips counts what a connection sends: each statement outside a
// batch and each batch is one round trip (n); every statement, in a batch
// or not, is one statement (stmts).
type roundTrips struct{ n, stmts atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	r.stmts.Add(1)
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	r.stmts.Add(1)
}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// Do costs the bare transaction's round trips: with one statement of work,
// a first execution is three (BEGIN + claim, the work, record + COMMIT) and
// a replay two (the claim's batch and the ROLLBACK). In the caller's
// transaction the claim is one more, and a result to store another. The
// fenced twin pays for its lock: acquire, fenced read, the work, fenced put,
// release; a replay, acquire, fenced read, release.
func TestDoRoundTrips(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, append(idempotency.Migrations(), fencedlock.Migrations()...)...)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE charges (key text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(db.Pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	trips := &roundTrips{}
	cfg.ConnConfig.Tracer = trips
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := newPostgres(t, &testdb.DB{Pool: pool}, nil)
	work := func(result idempotency.Result) func(context.Context) (idempotency.Result, error) {
		return func(ctx context.Context) (idempotency.Result, error) {
			tx, _ := idempotency.TxFrom(ctx)
			_, err := tx.Exec(ctx, `INSERT INTO charges VALUES ('k')`)
			return result, err
		}
	}
	// count checks the round trips and (unless wantStmts is 0) the
	// statements of op's last run.
	count := func(what string, want, wantStmts int64, op func(i int) error) {
		t.Helper()
		for i := range 3 { // the first runs prepare the statements
			trips.n.Store(0)
			trips.stmts.Store(0)
			if err := op(i); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		if got := trips.n.Load(); got != want {
			t.Errorf("%s: %d round trips, want %d", what, got, want)
		}
		if got := trips.stmts.Load(); wantStmts != 0 && got != wantStmts {
			t.Errorf("%s: %d statements, want %d", what, got, wantStmts)
		}
	}
	result := idempotency.Result{Status: 201, Body: []byte("charged")}
	// BEGIN, the lock, the read, the work, the record, COMMIT.
	count("first execution", 3, 6, func(i int) error {
		_, err := store.Do(ctx, idempotency.Key{ID: "first-" + string(rune('a'+i))}, fpA, work(result))
		return err
	})
	count("replay", 2, 4, func(int) error {
		_, err := store.Do(ctx, idempotency.Key{ID: "first-a"}, fpA, work(result))
		return err
	})
	for _, c := range []struct {
		name   string
		result idempotency.Result
		want   int64 // BEGIN, the claim, the work, [the result], COMMIT
		stmts  int64 // BEGIN, SAVEPOINT, the claim, the work, [the result, RELEASE], COMMIT
	}{{"effect-only", idempotency.Result{}, 4, 5}, {"with-result", result, 5, 7}} {
		count("in the caller's transaction, "+c.name, c.want, c.stmts, func(i int) error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				key := idempotency.Key{ID: c.name + "-" + string(rune('a'+i))}
				_, err := store.WithDB(tx).Do(ctx, key, fpA, work(c.result))
				return err
			})
		})
	}
	locks, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	fenced, err := idempotency.NewFenced(locks, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	fencedWork := func(ctx context.Context) (idempotency.Result, error) {
		_, err := pool.Exec(ctx, `INSERT INTO charges VALUES ('k')`)
		return result, err
	}
	// A fresh key's lock has no row yet: the acquire's update takes nothing
	// and its insert makes the row (2), then the fenced read, the work, the
	// fenced put and the release.
	count("fenced twin, first execution", 6, 0, func(i int) error {
		_, err := fenced.Do(ctx, idempotency.Key{ID: "fenced-" + string(rune('a'+i))}, fpA, fencedWork)
		return err
	})
	count("fenced twin, replay", 3, 0, func(int) error {
		_, err := fenced.Do(ctx, idempotency.Key{ID: "fenced-a"}, fpA, fencedWork)
		return err
	})
}
