package occ

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockfree-go/lockfree/internal/telemetry"
)

// The metrics of Update and RetryOnConflict (docs/occ.md, "Metrics").
const (
	metricAttempts   = "lockfree.occ.attempts"
	metricConflicts  = "lockfree.occ.conflicts"
	metricGiveUps    = "lockfree.occ.give_ups"
	metricRetryDelay = "lockfree.occ.retry.delay"
)

// occTelemetry holds the instruments of the retry loop, with the attribute
// sets built once.
type occTelemetry struct {
	tracer           telemetry.Tracer
	attempts         metric.Int64Counter
	conflicts        metric.Int64Counter
	giveUps          metric.Int64Counter
	delay            metric.Float64Histogram
	version, aborted telemetry.Attrs
}

func newTelemetry(mp metric.MeterProvider, tp trace.TracerProvider) *occTelemetry {
	in := telemetry.NewInstruments(mp, "occ")
	return &occTelemetry{
		tracer:    telemetry.NewTracer(tp, "occ"),
		attempts:  in.Counter(metricAttempts, "{attempt}", "Attempts of a read-modify-write by Update or RetryOnConflict."),
		conflicts: in.Counter(metricConflicts, "{conflict}", "Attempts refused because the row moved on (cause version) or the database aborted the transaction (cause aborted)."),
		giveUps:   in.Counter(metricGiveUps, "{call}", "Calls of Update or RetryOnConflict that ran out of attempts on a conflict."),
		delay:     in.Duration(metricRetryDelay, "Delays slept before a retry."),
		version:   telemetry.NewAttrs(attribute.String(telemetry.Cause, "version")),
		aborted:   telemetry.NewAttrs(attribute.String(telemetry.Cause, "aborted")),
	}
}

// noTelemetry records nothing: the loop's telemetry when neither the store
// nor an option gives one.
var noTelemetry = newTelemetry(nil, nil)

// attempted counts an attempt and, when it was refused, its conflict.
func (t *occTelemetry) attempted(ctx context.Context, err error) {
	t.attempts.Add(ctx, 1)
	switch {
	case err == nil:
	case errors.Is(err, ErrConflict):
		t.conflicts.Add(ctx, 1, t.version.Add()...)
	case IsRetryable(err):
		t.conflicts.Add(ctx, 1, t.aborted.Add()...)
	}
}

// byProvider keeps the telemetry of each MeterProvider given to
// WithMeterProvider, so that an option on every call creates its
// instruments once.
var byProvider sync.Map // metric.MeterProvider → *occTelemetry

func telemetryOf(mp metric.MeterProvider) *occTelemetry {
	if mp == nil {
		return noTelemetry
	}
	if !reflect.TypeOf(mp).Comparable() { // cannot be a map key: built each time
		return newTelemetry(mp, nil)
	}
	if t, ok := byProvider.Load(mp); ok {
		return t.(*occTelemetry)
	}
	t, _ := byProvider.LoadOrStore(mp, newTelemetry(mp, nil))
	return t.(*occTelemetry)
}

// WithMeterProvider makes the call record its metrics (docs/occ.md,
// "Metrics") on mp: the way to measure RetryOnConflict, which has no store.
// Update records on its store's TableConfig.MeterProvider unless this
// option is given. Instruments are created once per provider. Defaults to
// none (or the store's).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.tel = telemetryOf(mp) }
}

// spanStart starts the span of one Update.
func (t *occTelemetry) spanStart(ctx context.Context, name string) (context.Context, telemetry.Span) {
	return t.tracer.Start(ctx, name)
}

// retried records the delay before a retry.
func (t *occTelemetry) retried(ctx context.Context, d time.Duration) {
	t.delay.Record(ctx, d.Seconds())
}
