package idempotency

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/fencedlock"
	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of an executor (docs/idempotency.md, "Metrics"), each with
// lockfree.mode: transactional (Postgres.Do, Memory.Do), leased or fenced.
const (
	metricRequests = "lockfree.idempotency.requests"
	metricStored   = "lockfree.idempotency.stored.size"
)

// The values of lockfree.outcome.
const (
	outExecuted = iota
	outReplayed
	outInFlight
	outKeyReused
	outExpired
	outSuperseded
	outUnrecorded
	outInvalid
	outError
	nOutcomes
)

var outcomeNames = [nOutcomes]string{"executed", "replayed", "in_flight", "key_reused", "expired", "superseded", "unrecorded", "invalid", "error"}

// execTelemetry is an executor's instruments, with an attribute set per
// outcome built once.
type execTelemetry struct {
	tracer   telemetry.Tracer
	span     string // "idempotency.Do"
	requests metric.Int64Counter
	stored   metric.Int64Histogram
	outcomes [nOutcomes]telemetry.Attrs
	mode     telemetry.Attrs
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider, mode string) *execTelemetry {
	in := telemetry.NewInstruments(mp, "idempotency")
	m := attribute.String(telemetry.Mode, mode)
	t := &execTelemetry{
		tracer: telemetry.NewTracer(tp, "idempotency"),
		span:   "idempotency.Do",
		requests: in.Counter(metricRequests, "{request}",
			"Executions asked of an executor, by outcome (executed, replayed, in_flight, key_reused, expired, superseded, unrecorded, invalid, error)."),
		stored: in.Histogram(metricStored, "By", "Size of each result stored by a first execution (body and headers).",
			256, 1024, 4096, 16384, 65536, 262144, 1048576),
		mode: telemetry.NewAttrs(m),
	}
	for o := range nOutcomes {
		t.outcomes[o] = telemetry.NewAttrs(m, attribute.String(telemetry.Outcome, outcomeNames[o]))
	}
	return t
}

// started is one execution under way.
type started struct {
	t    *execTelemetry
	span telemetry.Span
}

// start starts an execution's span; end counts it.
func (t *execTelemetry) start(ctx context.Context) (context.Context, started) {
	ctx, span := t.tracer.Start(ctx, t.span)
	return ctx, started{t, span}
}

// end counts the execution with the outcome res and err say, records the
// size of a result a first execution stored, and ends the span: a refusal
// (in flight, reused, expired, superseded) is an outcome, not a failure; an
// unrecorded result is both.
func (s started) end(ctx context.Context, res Result, err error) {
	o := outcomeOf(res, err)
	s.t.requests.Add(ctx, 1, s.t.outcomes[o].Add()...)
	if o == outExecuted {
		s.t.stored.Record(ctx, resultSize(res), s.t.mode.Record()...)
	}
	if s.span.Recording() {
		s.span.Set(attribute.String(telemetry.Outcome, outcomeNames[o]))
	}
	if o != outError && o != outUnrecorded {
		err = nil
	}
	s.span.End(err)
}

func outcomeOf(res Result, err error) int {
	switch {
	case err == nil && res.Replayed:
		return outReplayed
	case err == nil:
		return outExecuted
	case errors.Is(err, ErrInFlight):
		return outInFlight
	case errors.Is(err, ErrKeyReused):
		return outKeyReused
	case errors.Is(err, ErrExpired):
		return outExpired
	case errors.Is(err, ErrSuperseded), errors.Is(err, fencedlock.ErrFenced):
		return outSuperseded
	case errors.Is(err, ErrUnrecorded):
		return outUnrecorded
	case errors.Is(err, ErrInvalid):
		return outInvalid
	}
	return outError
}

// resultSize is about what a stored result takes: its body and headers.
func resultSize(r Result) int64 {
	n := len(r.Body)
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v)
		}
	}
	return int64(n)
}
