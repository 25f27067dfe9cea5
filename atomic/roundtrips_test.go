package atomic_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockfree-go/lockfree/atomic"
	"github.com/lockfree-go/lockfree/internal/testdb"
)

// tracer records what a pool sends: each statement (a query or an exec is
// one round trip, a batch one for all its statements) and each prepare (one
// more round trip, the first time a connection sees a statement).
type tracer struct {
	mu       sync.Mutex
	sent     []string
	prepares int
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (t *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = append(t.sent, "batch")
	return ctx
}

func (t *tracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (t *tracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.prepares++
	return ctx
}

func (t *tracer) TracePrepareEnd(context.Context, *pgx.Conn, pgx.TracePrepareEndData) {}

// take returns what was sent since the last call, and how many prepares.
func (t *tracer) take() (sent []string, prepares int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sent, prepares = t.sent, t.prepares
	t.sent, t.prepares = nil, 0
	return sent, prepares
}

// tracedPool returns a pool of one connection on db's schema, so that a
// statement is prepared once, and its tracer.
func tracedPool(t testing.TB, db *testdb.DB) (*pgxpool.Pool, *tracer) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &tracer{}
	cfg.MaxConns = 1
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool, tr
}

// roundTrips runs op twice — once to prepare its statements — and returns
// what the second run sent. It fails the test if the second run prepared
// anything.
func roundTrips(t *testing.T, tr *tracer, op func(run int) error, want func(error) bool) []string {
	t.Helper()
	for run := range 2 {
		tr.take()
		if err := op(run); !want(err) {
			t.Fatalf("run %d: unexpected result %v", run, err)
		}
	}
	sent, prepares := tr.take()
	if prepares > 0 {
		t.Fatalf("%d prepares on the second run: the statements are not cached", prepares)
	}
	return sent
}

// Postgres sends one statement per operation, whether it applies, is
// refused or finds no row: the bare conditional statement, wrapped with the
// read that answers a refusal in the same round trip.
func TestPostgresRoundTrips(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	pool, tr := tracedPool(t, db)
	store := newPostgres(t, pool, inventory)
	for k, v := range map[string]int64{"stock": 1000, "empty": 0} {
		if err := store.Claim(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	const (
		tbl    = `"Inventory ""stock"""`
		update = `UPDATE ` + tbl + ` SET "quantity" = `
		head   = `WITH u AS (`
		tail   = `) SELECT true, "quantity" FROM u UNION ALL SELECT false, "quantity" FROM ` + tbl + ` WHERE "sku" = $1 AND NOT EXISTS (SELECT FROM u)`
		dec    = head + update + `"quantity" - $2 WHERE "sku" = $1 AND "quantity" >= $3 RETURNING "quantity"` + tail
		inc    = head + update + `"quantity" + $2 WHERE "sku" = $1 AND "quantity" <= $3 RETURNING "quantity"` + tail
		cas    = head + update + `$3 WHERE "sku" = $1 AND "quantity" = $2 RETURNING "quantity"` + tail
		sig    = head + update + `$2 WHERE "sku" = $1 AND "quantity" < $2 RETURNING "quantity"` + tail
		clm    = head + `INSERT INTO ` + tbl + ` ("sku", "quantity") VALUES ($1, $2) ON CONFLICT ("sku") DO NOTHING RETURNING "quantity"` + tail
	)
	ok := func(err error) bool { return err == nil }
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	cases := []struct {
		name string
		op   func(run int) error
		want func(error) bool
		sent []string
	}{
		{"Decrement", func(int) error { _, err := store.Decrement(ctx, "stock", 1); return err }, ok, []string{dec}},
		{"Decrement refused", func(int) error { _, err := store.Decrement(ctx, "empty", 1); return err }, is(atomic.ErrInsufficient), []string{dec}},
		{"Decrement not found", func(int) error { _, err := store.Decrement(ctx, "nothing", 1); return err }, is(atomic.ErrNotFound), []string{dec}},
		{"Increment", func(int) error { _, err := store.Increment(ctx, "stock", 1, atomic.NoCap); return err }, ok, []string{inc}},
		{"Increment refused", func(int) error { _, err := store.Increment(ctx, "stock", 1, 10); return err }, is(atomic.ErrInsufficient), []string{inc}},
		{"CompareAndSet", func(run int) error { return store.CompareAndSet(ctx, "empty", int64(run), int64(run+1)) }, ok, []string{cas}},
		{"CompareAndSet refused", func(int) error { return store.CompareAndSet(ctx, "stock", 1, 2) }, is(atomic.ErrConflict), []string{cas}},
		{"SetIfGreater", func(run int) error { return store.SetIfGreater(ctx, "empty", int64(10+run)) }, ok, []string{sig}},
		{"SetIfGreater refused", func(int) error { return store.SetIfGreater(ctx, "empty", 1) }, is(atomic.ErrConflict), []string{sig}},
		{"SetIfGreater not found", func(int) error { return store.SetIfGreater(ctx, "nothing", 1) }, is(atomic.ErrNotFound), []string{sig}},
		{"Claim", func(run int) error { return store.Claim(ctx, fmt.Sprint("new-", run), 1) }, ok, []string{clm}},
		{"Claim refused", func(int) error { return store.Claim(ctx, "stock", 1) }, is(atomic.ErrConflict), []string{clm}},
	}
	for _, c := range cases {
		if got := roundTrips(t, tr, c.op, c.want); !slices.Equal(got, c.sent) {
			t.Errorf("%s sent %d statements:\n\t%s\nwant %d:\n\t%s", c.name, len(got), strings.Join(got, "\n\t"), len(c.sent), strings.Join(c.sent, "\n\t"))
		}
	}
}

// An operation ID adds no round trip: with an ID every operation is one
// statement — its first execution, its refusal and its replay alike.
func TestPostgresRoundTripsWithID(t *testing.T) {
	t.Parallel()
	db := newTable(t)
	pool, tr := tracedPool(t, db)
	store := newPostgres(t, pool, inventory)
	for k, v := range map[string]int64{"stock": 1000, "empty": 0, "other": 1000, "zero": 0} {
		if err := store.Claim(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	ok := func(err error) bool { return err == nil }
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	fresh := func(int) atomic.Option { return atomic.WithID(newID(t)) }
	replayed := atomic.WithID(newID(t))
	same := func(int) atomic.Option { return replayed }
	cases := []struct {
		name string
		op   func(run int) error
		want func(error) bool
	}{
		{"Decrement", func(run int) error { _, err := store.Decrement(ctx, "stock", 1, fresh(run)); return err }, ok},
		{"Decrement refused", func(run int) error { _, err := store.Decrement(ctx, "empty", 1, fresh(run)); return err }, is(atomic.ErrInsufficient)},
		{"Decrement not found", func(run int) error { _, err := store.Decrement(ctx, "nothing", 1, fresh(run)); return err }, is(atomic.ErrNotFound)},
		{"Decrement replayed", func(run int) error { _, err := store.Decrement(ctx, "stock", 1, same(run)); return err }, ok},
		{"Increment", func(run int) error { _, err := store.Increment(ctx, "stock", 1, atomic.NoCap, fresh(run)); return err }, ok},
		{"CompareAndSet", func(run int) error {
			return store.CompareAndSet(ctx, "empty", int64(run), int64(run+1), fresh(run))
		}, ok},
		{"CompareAndSet refused", func(run int) error { return store.CompareAndSet(ctx, "other", 1, 2, fresh(run)) }, is(atomic.ErrConflict)},
		{"SetIfGreater", func(run int) error { return store.SetIfGreater(ctx, "empty", int64(10+run), fresh(run)) }, ok},
		{"Claim", func(run int) error { return store.Claim(ctx, fmt.Sprint("new-", run), 1, fresh(run)) }, ok},
		{"Claim refused", func(run int) error { return store.Claim(ctx, "stock", 1, fresh(run)) }, is(atomic.ErrConflict)},
		{"DecrementMany", func(run int) error {
			_, err := store.DecrementMany(ctx, map[string]int64{"stock": 1, "other": 1}, fresh(run))
			return err
		}, ok},
		{"DecrementMany refused", func(run int) error {
			_, err := store.DecrementMany(ctx, map[string]int64{"stock": 1, "zero": 1}, fresh(run))
			return err
		}, is(atomic.ErrInsufficient)},
		{"Resolve", func(run int) error { _, err := store.Resolve(ctx, newID(t)); return err }, ok},
	}
	for _, c := range cases {
		got := roundTrips(t, tr, c.op, c.want)
		if len(got) != 1 || !strings.HasPrefix(got[0], "WITH age AS MATERIALIZED") {
			t.Errorf("%s with an ID sent %d statements:\n\t%s\nwant 1, the operation's own", c.name, len(got), strings.Join(got, "\n\t"))
		}
	}
}
