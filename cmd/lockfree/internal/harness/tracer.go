package harness

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// tracer counts what a pool sends PostgreSQL: statements, and the round
// trips they cost. A query (Exec, Query, QueryRow; BEGIN and COMMIT too) is
// one statement and one round trip; a batch is one round trip for all its
// statements; a COPY is one of each; a prepare that reaches the server (the
// first use of a statement on a connection) is one round trip and no
// statement. Connects are counted apart, as the pool's, not an operation's.
//
// It counts everything the pool sends, and apart what it sends on behalf of
// an operation (a context from Env.Invoke): the rest is the approach's
// background work — keepalives, LISTEN connections, consumer loops — which
// its operations cost too. It is safe for concurrent use.
type tracer struct {
	all, op  tally
	connects atomic.Int64
}

// tally is one set of a tracer's counters.
type tally struct {
	queries, batches, batched, copies, prepares atomic.Int64
}

var (
	_ pgx.QueryTracer    = (*tracer)(nil)
	_ pgx.BatchTracer    = (*tracer)(nil)
	_ pgx.CopyFromTracer = (*tracer)(nil)
	_ pgx.PrepareTracer  = (*tracer)(nil)
	_ pgx.ConnectTracer  = (*tracer)(nil)
)

// counts are a tracer's totals at one moment.
type counts struct {
	RoundTrips, Statements     int64 // everything
	OpRoundTrips, OpStatements int64 // on behalf of operations
	Connects                   int64
}

func (t *tracer) counts() counts {
	c := counts{Connects: t.connects.Load()}
	c.RoundTrips, c.Statements = t.all.totals()
	c.OpRoundTrips, c.OpStatements = t.op.totals()
	return c
}

func (t *tally) totals() (trips, statements int64) {
	q, c := t.queries.Load(), t.copies.Load()
	return q + t.batches.Load() + c + t.prepares.Load(), q + t.batched.Load() + c
}

// add counts in all, and in op when ctx belongs to an operation.
func (t *tracer) add(ctx context.Context, f func(*tally) *atomic.Int64) {
	f(&t.all).Add(1)
	if op := opFrom(ctx); op != nil && op.call != nil {
		f(&t.op).Add(1)
	}
}

func (t *tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.queries })
	return ctx
}

func (t *tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.batches })
	return ctx
}

func (t *tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.batched })
}

func (t *tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t *tracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.copies })
	return ctx
}

func (t *tracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (t *tracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (t *tracer) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		t.add(ctx, func(c *tally) *atomic.Int64 { return &c.prepares })
	}
}

func (t *tracer) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	t.connects.Add(1)
	return ctx
}

func (t *tracer) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}
