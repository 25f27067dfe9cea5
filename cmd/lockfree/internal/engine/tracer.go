package engine

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Tracer counts what a pool sends PostgreSQL: statements, and the round
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
type Tracer struct {
	all, op  tally
	connects atomic.Int64
}

// tally is one set of a tracer's counters.
type tally struct {
	queries, batches, batched, copies, prepares atomic.Int64
}

var (
	_ pgx.QueryTracer    = (*Tracer)(nil)
	_ pgx.BatchTracer    = (*Tracer)(nil)
	_ pgx.CopyFromTracer = (*Tracer)(nil)
	_ pgx.PrepareTracer  = (*Tracer)(nil)
	_ pgx.ConnectTracer  = (*Tracer)(nil)
)

// Counts are a Tracer's totals at one moment.
type Counts struct {
	RoundTrips, Statements     int64 // everything
	OpRoundTrips, OpStatements int64 // on behalf of operations
	OpRiders                   int64 // of OpStatements, those behind a batch's first
	Connects                   int64
}

// Counts returns the totals so far.
func (t *Tracer) Counts() Counts {
	c := Counts{Connects: t.connects.Load()}
	c.RoundTrips, c.Statements = t.all.totals()
	c.OpRoundTrips, c.OpStatements = t.op.totals()
	c.OpRiders = t.op.batched.Load() - t.op.batches.Load()
	return c
}

func (t *tally) totals() (trips, statements int64) {
	q, c := t.queries.Load(), t.copies.Load()
	return q + t.batches.Load() + c + t.prepares.Load(), q + t.batched.Load() + c
}

// add counts in all, and in op when ctx belongs to an operation.
func (t *Tracer) add(ctx context.Context, f func(*tally) *atomic.Int64) {
	f(&t.all).Add(1)
	if op := opFrom(ctx); op != nil && op.call != nil {
		f(&t.op).Add(1)
	}
}

func (t *Tracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.queries })
	return ctx
}

func (t *Tracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (t *Tracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.batches })
	return ctx
}

func (t *Tracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchQueryData) {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.batched })
}

func (t *Tracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (t *Tracer) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	t.add(ctx, func(c *tally) *atomic.Int64 { return &c.copies })
	return ctx
}

func (t *Tracer) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func (t *Tracer) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (t *Tracer) TracePrepareEnd(ctx context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		t.add(ctx, func(c *tally) *atomic.Int64 { return &c.prepares })
	}
}

func (t *Tracer) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	t.connects.Add(1)
	return ctx
}

func (t *Tracer) TraceConnectEnd(context.Context, pgx.TraceConnectEndData) {}
