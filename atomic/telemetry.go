package atomic

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// metricOperations counts the operations of a store (docs/atomic.md,
// "Metrics"), by lockfree.operation and lockfree.outcome.
const metricOperations = "lockfree.atomic.operations"

// opKind indexes an operation's attribute sets.
type opKind int

const (
	opDecrement opKind = iota
	opIncrement
	opDecrementMany
	opCompareAndSet
	opSetIfGreater
	opClaim
	nOps
)

// The values of lockfree.operation and the span names, by opKind.
var (
	opNames   = [nOps]string{"decrement", "increment", "decrement_many", "compare_and_set", "set_if_greater", "claim"}
	spanNames = [nOps]string{"atomic.Decrement", "atomic.Increment", "atomic.DecrementMany", "atomic.CompareAndSet", "atomic.SetIfGreater", "atomic.Claim"}
)

// The values of lockfree.outcome.
const (
	outApplied = iota
	outInsufficient
	outConflict
	outNotFound
	outInvalid
	outFenced
	outReplayed
	outIDReused
	outExpired
	outAbandoned
	outError
	nOutcomes
)

var outcomeNames = [nOutcomes]string{"applied", "insufficient", "conflict", "not_found", "invalid", "fenced",
	"replayed", "id_reused", "expired", "abandoned", "error"}

// storeTelemetry is a store's instrument, with an attribute set per
// operation and outcome built once.
type storeTelemetry struct {
	tracer telemetry.Tracer
	ops    metric.Int64Counter
	attrs  [nOps][nOutcomes]telemetry.Attrs
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) *storeTelemetry {
	in := telemetry.NewInstruments(mp, "atomic")
	t := &storeTelemetry{
		tracer: telemetry.NewTracer(tp, "atomic"),
		ops: in.Counter(metricOperations, "{operation}",
			"Operations of an atomic store, by operation and outcome (applied, insufficient, conflict, not_found, invalid, fenced, "+
				"replayed, id_reused, expired, abandoned, error)."),
	}
	for op := range nOps {
		for out := range nOutcomes {
			t.attrs[op][out] = telemetry.NewAttrs(attribute.String(telemetry.Operation, opNames[op]),
				attribute.String(telemetry.Outcome, outcomeNames[out]))
		}
	}
	return t
}

// started is one operation under way. replayed is set when an operation
// with an ID was answered from its record.
type started struct {
	t        *storeTelemetry
	op       opKind
	span     telemetry.Span
	replayed bool
}

// start starts op's span; end counts the operation.
func (t *storeTelemetry) start(ctx context.Context, op opKind) (context.Context, started) {
	ctx, span := t.tracer.Start(ctx, spanNames[op])
	return ctx, started{t: t, op: op, span: span}
}

// end counts the operation with the outcome err says, and ends its span: a
// refusal is an outcome, not a failure of the span.
func (s started) end(ctx context.Context, err error) {
	out := outcome(err)
	if s.replayed && out != outIDReused {
		out = outReplayed
	}
	s.t.ops.Add(ctx, 1, s.t.attrs[s.op][out].Add()...)
	if s.span.Recording() {
		s.span.Set(attribute.String(telemetry.Outcome, outcomeNames[out]))
	}
	if out != outError {
		err = nil
	}
	s.span.End(err)
}

func outcome(err error) int {
	switch {
	case err == nil:
		return outApplied
	case errors.Is(err, ErrInsufficient):
		return outInsufficient
	case errors.Is(err, ErrConflict):
		return outConflict
	case errors.Is(err, ErrNotFound):
		return outNotFound
	case errors.Is(err, ErrInvalid):
		return outInvalid
	case errors.Is(err, fencedlock.ErrFenced):
		return outFenced
	case errors.Is(err, ErrIDReused):
		return outIDReused
	case errors.Is(err, ErrExpired):
		return outExpired
	case errors.Is(err, ErrAbandoned):
		return outAbandoned
	}
	return outError
}
