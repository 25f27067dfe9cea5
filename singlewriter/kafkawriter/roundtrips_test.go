package kafkawriter_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/testdb"
	"github.com/lockfree-go/lockfree/singlewriter/kafkawriter"
)

// roundTrips counts the statements and batches a pool sends: each is one
// round trip to PostgreSQL (a batch is sent and read as one). Statement
// preparation, which pgx does once per statement and connection, is not
// counted: the tests measure the steady state.
type roundTrips struct {
	n   atomic.Int64
	mu  sync.Mutex
	log []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	r.mu.Lock()
	r.log = append(r.log, d.SQL)
	r.mu.Unlock()
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// reset returns the count since the last reset, and the statements.
func (r *roundTrips) reset() (int64, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	log := r.log
	r.log = nil
	return r.n.Swap(0), log
}

// tracedPool connects to db's schema through a pool whose round trips r
// counts.
func tracedPool(t testing.TB, db *testdb.DB, r *roundTrips) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = r
	cfg.MaxConns = 1 // one connection: every statement is prepared once
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// The fenced twin's cost, which docs/singlewriter.md states: a run of an
// entity's events costs six round trips besides the handler's own
// statements — acquire, fenced read, BEGIN, fenced progress write, COMMIT,
// release — whatever the run's length; a run found applied costs three
// (acquire, fenced read, release). A handler that sends its statements in one
// pgx.Batch sends the fenced write with them: six in all.
func TestFencedApplyRoundTrips(t *testing.T) {
	t.Parallel()
	db, _ := fencedEnv(t)
	var r roundTrips
	pool := tracedPool(t, db, &r)
	locks, err := fencedlock.NewPostgres(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := kafkawriter.NewFenced(pool, locks, nil)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(seq int64, handlerStatements int, batched bool) (bool, int64, []string) {
		t.Helper()
		r.reset()
		applied, err := f.Apply(ctx, "stream", "entity", seq, func(ctx context.Context, tx pgx.Tx, after int64) error {
			if batched {
				b := &pgx.Batch{}
				for range handlerStatements {
					b.Queue(`SELECT 1`)
				}
				return tx.SendBatch(ctx, b).Close()
			}
			for range handlerStatements {
				if _, err := tx.Exec(ctx, `SELECT 1`); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		n, log := r.reset()
		return applied, n, log
	}
	apply(1, 1, false) // prepares every statement on the one connection
	for _, c := range []struct {
		seq      int64
		handler  int
		batched  bool
		applied  bool
		expected int64
	}{
		{seq: 5, handler: 0, applied: true, expected: 6},
		{seq: 9, handler: 4, applied: true, expected: 6 + 4},
		{seq: 9, handler: 4, applied: false, expected: 3},
		// A handler's pgx.Batch carries the fenced write: the events and
		// their record are one round trip, as in the naive twin.
		{seq: 12, handler: 4, batched: true, applied: true, expected: 6},
		{seq: 12, handler: 4, batched: true, applied: false, expected: 3},
	} {
		applied, n, log := apply(c.seq, c.handler, c.batched)
		if applied != c.applied || n != c.expected {
			t.Errorf("Apply(seq %d, %d handler statements, batched %v): applied=%v in %d round trips, want %v in %d: %q",
				c.seq, c.handler, c.batched, applied, n, c.applied, c.expected, log)
		}
	}
}

// The single writer's cost: a batch of messages costs three round trips
// besides the handler's statements — BEGIN, the inbox's compare-and-set,
// COMMIT — and each assignment of a partition one claim.
func TestConsumerRoundTrips(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	e.produce(t, 0, 200, 10)
	var r roundTrips
	pool := tracedPool(t, e.db, &r)
	cfg := consumerConfig("c")
	cfg.BatchSize = 50
	cfg.BatchWait = time.Second // full batches: the topic is filled already
	var handled atomic.Int64
	c, err := kafkawriter.NewConsumer(pool, e.source(), func(ctx context.Context, tx pgx.Tx, m kafka.Message) error {
		handled.Add(1)
		return nil
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, c)
	waitFor(t, 60*time.Second, func() bool { return c.Stats().Applied == 200 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	n, log := r.reset()
	// Preparing is not counted; a retried transaction would show as more.
	t.Logf("%d round trips: %d claims, %d transactions for %d messages", n, s.Claims, s.Transactions, s.Applied)
	if want := s.Claims + 3*s.Transactions; n != want {
		t.Errorf("%d round trips for %d claims and %d transactions (%d messages), want %d: %q",
			n, s.Claims, s.Transactions, handled.Load(), want, log)
	}
}
